//! The HTML report of a qualification run (`turnstile qualify --report FILE.html`): one
//! self-contained file, charts drawn as inline SVG here in Rust, no script, no external asset.
//!
//! Charts over the virtual window, one point per second: arrivals, active and queued calls
//! (sampled at each second's end), arrivals shed by reason, and the admission ratio of each
//! principal class; then each principal's admission ratio over the whole window (one bar per
//! principal, ranked, coloured by class); for a record with the fair-share or deadline A/B
//! block, the token-fair scheduling section ([`fair_share`]); then the bounds table with
//! pass/fail, and the manifest and record digests.
//!
//! # Invariants
//!
//! - The file is a pure function of the record, the per-arrival outcomes and the samples: the
//!   same run writes the same bytes (no clock, no randomness).
//! - No principal or workspace ID appears: arrivals carry their principal's class and an
//!   anonymous ordinal (its position in the manifest), never its ID.
//! - Every text from the record is HTML-escaped.

mod fair_share;

use std::collections::BTreeMap;
use std::fmt::Write;

use turnstile_admission::Counts;

use crate::harness::{ArrivalOutcome, Ending};
use crate::manifest::PrincipalClass;
use crate::record::{BuildProfile, LoadResultRecord, Mode};

const PALETTE: [&str; 8] = [
    "#0b5cad", "#a4161a", "#1d6b2f", "#8a5300", "#6a1b9a", "#00695c", "#37474f", "#c2185b",
];

/// One named series of per-second values, in its own colour or the palette's next.
struct Series {
    name: String,
    values: Vec<f64>,
    colour: Option<&'static str>,
}

/// A class and its (arrived, admitted) per second.
type ClassCells = (PrincipalClass, Vec<(f64, f64)>);

/// A principal class's colour, the same in every chart of the report.
fn class_colour(class: PrincipalClass) -> &'static str {
    match class {
        PrincipalClass::Quiet => PALETTE[0],
        PrincipalClass::Noisy => PALETTE[1],
    }
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn nice_max(value: f64) -> f64 {
    if value <= 0.0 || !value.is_finite() {
        return 1.0;
    }
    let pow = 10f64.powf(value.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * pow >= value {
            return m * pow;
        }
    }
    10.0 * pow
}

fn label(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.1}M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.1}k", value / 1e3)
    } else if value.fract() == 0.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// A line chart of `series` over `seconds` points, as an SVG element.
fn line_chart(title: &str, series: &[Series], seconds: usize, y_max: Option<f64>) -> String {
    let (width, height) = (900.0, 240.0);
    let (left, right, top, bottom) = (56.0, 10.0, 10.0, 28.0);
    let (w, h) = (width - left - right, height - top - bottom);
    let max = y_max.unwrap_or_else(|| {
        nice_max(
            series
                .iter()
                .flat_map(|s| s.values.iter().copied())
                .fold(0.0, f64::max),
        )
    });
    let n = seconds.max(2) as f64;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg viewBox="0 0 {width} {height}" role="img" aria-label="{}">"#,
        escape(title)
    );
    for i in 0..=4 {
        let y = top + h - h * f64::from(i) / 4.0;
        let _ = write!(
            svg,
            r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#d5dbe1"/><text x="{}" y="{:.1}" text-anchor="end" font-size="11" fill="#4a5561">{}</text>"##,
            left + w,
            left - 6.0,
            y + 4.0,
            label(max * f64::from(i) / 4.0)
        );
    }
    let ticks = 6;
    for i in 0..=ticks {
        let second = (n - 1.0) * f64::from(i) / f64::from(ticks);
        let x = left + w * second / (n - 1.0);
        let _ = write!(
            svg,
            r##"<text x="{x:.1}" y="{}" text-anchor="middle" font-size="11" fill="#4a5561">{:.0} s</text>"##,
            height - 8.0,
            second
        );
    }
    for (k, s) in series.iter().enumerate() {
        let mut points = String::new();
        for (i, v) in s.values.iter().enumerate() {
            let x = left + w * i as f64 / (n - 1.0);
            let y = top + h - h * (v / max).min(1.0);
            let _ = write!(points, "{x:.1},{y:.1} ");
        }
        let _ = write!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="1.5" data-series="{}"/>"#,
            points.trim_end(),
            s.colour.unwrap_or(PALETTE[k % PALETTE.len()]),
            escape(&s.name)
        );
    }
    svg.push_str("</svg>");
    let mut legend = String::from(r#"<ul class="legend">"#);
    for (k, s) in series.iter().enumerate() {
        let total: f64 = s.values.iter().sum();
        let _ = write!(
            legend,
            r#"<li><svg width="10" height="10" aria-hidden="true"><rect width="10" height="10" fill="{}"/></svg> {}{}</li>"#,
            s.colour.unwrap_or(PALETTE[k % PALETTE.len()]),
            escape(&s.name),
            if y_max.is_none() && series.len() > 1 {
                format!(" (total {})", label(total))
            } else {
                String::new()
            }
        );
    }
    legend.push_str("</ul>");
    format!(
        r#"<figure class="chart"><figcaption>{}</figcaption>{svg}{legend}</figure>"#,
        escape(title)
    )
}

/// One principal's whole-window admission: (class, arrived, admitted).
type PrincipalTotals = (PrincipalClass, f64, f64);

/// A bar chart of each principal's admission ratio over the window, lowest first, coloured by
/// class: the distribution a class average hides.
fn principal_chart(totals: &BTreeMap<usize, PrincipalTotals>) -> String {
    let title = "Admission ratio per principal (admitted / arrived over the window, ranked)";
    let mut ranked: Vec<(f64, PrincipalClass, f64)> = totals
        .values()
        .filter(|(_, arrived, _)| *arrived > 0.0)
        .map(|(class, arrived, admitted)| (admitted / arrived, *class, *arrived))
        .collect();
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (width, height) = (900.0, 240.0);
    let (left, right, top, bottom) = (56.0, 10.0, 10.0, 28.0);
    let (w, h) = (width - left - right, height - top - bottom);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg viewBox="0 0 {width} {height}" role="img" aria-label="{}">"#,
        escape(title)
    );
    for i in 0..=4 {
        let y = top + h - h * f64::from(i) / 4.0;
        let _ = write!(
            svg,
            r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#d5dbe1"/><text x="{}" y="{:.1}" text-anchor="end" font-size="11" fill="#4a5561">{}</text>"##,
            left + w,
            left - 6.0,
            y + 4.0,
            label(f64::from(i) / 4.0)
        );
    }
    let n = ranked.len().max(1) as f64;
    let slot = w / n;
    for (rank, (ratio, class, arrived)) in ranked.iter().enumerate() {
        let bar = ratio.clamp(0.0, 1.0) * h;
        let colour = class_colour(*class);
        let _ = write!(
            svg,
            r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{bar:.1}" fill="{colour}" data-ratio="{ratio:.4}"><title>{:.1} % of {} arrivals</title></rect>"#,
            left + slot * rank as f64 + slot * 0.1,
            top + h - bar,
            (slot * 0.8).max(0.5),
            ratio * 100.0,
            label(*arrived)
        );
    }
    let _ = write!(
        svg,
        r##"<text x="{:.1}" y="{}" text-anchor="middle" font-size="11" fill="#4a5561">{} principals, lowest ratio first</text>"##,
        left + w / 2.0,
        height - 8.0,
        ranked.len()
    );
    svg.push_str("</svg>");
    let legend = format!(
        r#"<ul class="legend"><li><svg width="10" height="10" aria-hidden="true"><rect width="10" height="10" fill="{}"/></svg> quiet principals</li><li><svg width="10" height="10" aria-hidden="true"><rect width="10" height="10" fill="{}"/></svg> noisy principals</li></ul>"#,
        PALETTE[0], PALETTE[1]
    );
    format!(
        r#"<figure class="chart"><figcaption>{}</figcaption>{svg}{legend}</figure>"#,
        escape(title)
    )
}

fn second_of(ms: u64, seconds: usize) -> usize {
    ((ms / 1000) as usize).min(seconds.saturating_sub(1))
}

/// The self-contained HTML report of one admission-controller run.
pub fn html_report(
    record: &LoadResultRecord,
    outcomes: &[ArrivalOutcome],
    samples: &[Counts],
) -> String {
    let seconds = (record.window.seconds as usize).max(1);
    let mut arrivals = vec![0.0; seconds];
    let mut shed: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    // (arrivals, admitted) per class and second, by arrival instant.
    let mut classes: BTreeMap<&str, ClassCells> = BTreeMap::new();
    let mut principals: BTreeMap<usize, PrincipalTotals> = BTreeMap::new();
    for outcome in outcomes {
        let totals = principals.entry(outcome.principal_index).or_insert((
            outcome.principal_class,
            0.0,
            0.0,
        ));
        totals.1 += 1.0;
        if outcome.admitted {
            totals.2 += 1.0;
        }
        let at = second_of(outcome.at_ms, seconds);
        arrivals[at] += 1.0;
        if outcome.ending == Ending::Shed {
            let reason = outcome.reason.map_or("none", |r| r.as_str()).to_owned();
            shed.entry(reason).or_insert_with(|| vec![0.0; seconds])
                [second_of(outcome.settled_at_ms, seconds)] += 1.0;
        }
        let class = match outcome.principal_class {
            PrincipalClass::Quiet => "quiet principals",
            PrincipalClass::Noisy => "noisy principals",
        };
        let cell = &mut classes
            .entry(class)
            .or_insert_with(|| (outcome.principal_class, vec![(0.0, 0.0); seconds]))
            .1[at];
        cell.0 += 1.0;
        if outcome.admitted {
            cell.1 += 1.0;
        }
    }
    let counts = |pick: fn(&Counts) -> u64| -> Vec<f64> {
        let mut values: Vec<f64> = samples.iter().map(|c| pick(c) as f64).collect();
        values.resize(seconds, values.last().copied().unwrap_or(0.0));
        values
    };
    let o = &record.observations;
    let mut charts = String::new();
    charts.push_str(&line_chart(
        "Arrivals per second",
        &[Series {
            name: "arrivals".into(),
            colour: None,
            values: arrivals,
        }],
        seconds,
        None,
    ));
    charts.push_str(&line_chart(
        "Active and queued calls (end of each second)",
        &[
            Series {
                name: "active".into(),
                colour: None,
                values: counts(|c| c.active),
            },
            Series {
                name: "queued".into(),
                colour: None,
                values: counts(|c| c.queued),
            },
        ],
        seconds,
        None,
    ));
    let shed_series: Vec<Series> = if shed.is_empty() {
        vec![Series {
            name: "none shed".into(),
            colour: None,
            values: vec![0.0; seconds],
        }]
    } else {
        shed.into_iter()
            .map(|(name, values)| Series {
                name,
                values,
                colour: None,
            })
            .collect()
    };
    charts.push_str(&line_chart(
        "Arrivals shed per second, by reason",
        &shed_series,
        seconds,
        None,
    ));
    let ratio_series: Vec<Series> = classes
        .into_iter()
        .map(|(name, (class, cells))| Series {
            name: name.into(),
            colour: Some(class_colour(class)),
            values: cells
                .into_iter()
                .map(|(n, admitted)| if n > 0.0 { admitted / n } else { 1.0 })
                .collect(),
        })
        .collect();
    charts.push_str(&line_chart(
        "Admission ratio per principal class (admitted / arrived, by arrival second)",
        &ratio_series,
        seconds,
        Some(1.0),
    ));
    charts.push_str(&principal_chart(&principals));

    let mut bounds = String::new();
    for c in &record.comparisons {
        let _ = write!(
            bounds,
            r#"<tr data-pass="{pass}"><th scope="row">{}</th><td>{}</td><td>{}</td><td class="{cls}">{verdict}</td></tr>"#,
            escape(&c.bound),
            c.limit,
            c.observed,
            pass = c.pass,
            cls = if c.pass { "pass" } else { "fail" },
            verdict = if c.pass { "pass" } else { "FAIL" },
        );
    }
    let verdict = if record.passed { "PASSED" } else { "FAILED" };
    let mut shed_table = String::new();
    for (reason, n) in &o.shed_reasons {
        let _ = write!(shed_table, "<li>{}: {n}</li>", escape(reason));
    }
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>turnstile qualification: manifest {version}, {target}</title>
<style>
body{{font-family:system-ui,sans-serif;color:#1a1f24;background:#f4f6f8;margin:0;padding:16px;line-height:1.4}}
main{{max-width:960px;margin:0 auto}} h1{{font-size:1.3rem}} h2{{font-size:1.1rem;margin-top:24px}}
.verdict{{display:inline-block;padding:2px 10px;border-radius:10px;font-weight:700}}
.verdict.PASSED{{background:#dff0e2;color:#1d6b2f}} .verdict.FAILED{{background:#f8dcdc;color:#a4161a}}
figure.chart{{background:#fff;border:1px solid #d5dbe1;border-radius:8px;margin:12px 0;padding:8px}}
figure.chart>svg{{width:100%;height:auto;display:block}} .legend svg{{display:inline-block;vertical-align:middle}} figcaption{{color:#4a5561;font-size:.92rem}}
.legend{{list-style:none;padding:0;margin:4px 0 0;display:flex;gap:14px;flex-wrap:wrap;font-size:.85rem}}
table{{border-collapse:collapse;width:100%;background:#fff}} th,td{{text-align:left;padding:5px 8px;border-bottom:1px solid #d5dbe1}}
td.pass{{color:#1d6b2f;font-weight:600}} td.fail{{color:#a4161a;font-weight:700}}
dl{{display:grid;grid-template-columns:max-content 1fr;gap:4px 12px}} dd{{margin:0;word-break:break-all}} code{{font-size:.85rem}}
</style></head>
<body><main>
<h1>turnstile qualification report <span class="verdict {verdict}">{verdict}</span></h1>
<dl>
<dt>Manifest</dt><dd>{version} (<code>{schema}</code>)</dd>
<dt>Manifest digest</dt><dd><code class="manifest-digest">{manifest_digest}</code></dd>
<dt>Record digest</dt><dd><code class="record-digest">{record_digest}</code></dd>
<dt>Target</dt><dd>{target} · mode {mode} · virtual window {window} s · {build} build</dd>
<dt>Arrivals</dt><dd>{arrivals} arrived · {attempts} attempts · {completed} completed · {failed} failed · {shed} shed · {cancelled} cancelled</dd>
<dt>Shed by reason</dt><dd><ul>{shed_table}</ul></dd>
</dl>
<h2>Over the virtual window</h2>
{charts}
{scheduling}
<h2>Bounds</h2>
<table class="bounds"><thead><tr><th scope="col">Bound</th><th scope="col">Limit</th><th scope="col">Observed</th><th scope="col">Result</th></tr></thead><tbody>{bounds}</tbody></table>
<p>Principals appear by class (quiet, noisy) and as anonymous ranked bars; no principal or workspace ID is in this report.</p>
</main></body></html>
"#,
        version = escape(&record.manifest.version),
        schema = escape(&record.manifest.schema),
        manifest_digest = escape(&record.manifest.digest),
        record_digest = escape(&record.digest),
        target = record.target.as_str(),
        mode = match record.mode {
            Mode::OfflineFakeProvider => "offline-fake-provider",
            Mode::StagedProvider => "staged-provider",
        },
        window = record.window.seconds,
        build = match record.build.profile {
            BuildProfile::Release => "release",
            BuildProfile::Debug => "debug (resource figures not representative)",
        },
        arrivals = o.arrivals,
        attempts = o.attempts,
        completed = o.completed,
        failed = o.failed,
        shed = o.shed,
        cancelled = o.cancelled,
        scheduling = fair_share::section(o),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_principal_is_one_bar_ranked_by_its_admission_ratio() {
        let mut totals = BTreeMap::new();
        totals.insert(0, (PrincipalClass::Noisy, 100.0, 40.0));
        totals.insert(1, (PrincipalClass::Quiet, 10.0, 10.0));
        totals.insert(2, (PrincipalClass::Quiet, 20.0, 15.0));
        let svg = principal_chart(&totals);
        let ratios: Vec<&str> = svg
            .split("data-ratio=\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .collect();
        assert_eq!(ratios, ["0.4000", "0.7500", "1.0000"]);
        assert!(svg.contains("3 principals, lowest ratio first"));
        assert!(svg.contains(PALETTE[1]), "the noisy principal's colour");
    }

    /// A class has one colour in every chart: its line in the ratio chart is its bars' colour,
    /// whatever order the classes' names sort in.
    #[test]
    fn a_class_has_the_same_colour_in_every_chart() {
        let series: Vec<Series> = [PrincipalClass::Noisy, PrincipalClass::Quiet]
            .into_iter()
            .map(|class| Series {
                name: format!("{class:?}"),
                values: vec![1.0, 1.0],
                colour: Some(class_colour(class)),
            })
            .collect();
        let chart = line_chart("ratio", &series, 2, Some(1.0));
        let stroke = |name: &str| {
            chart
                .split("<polyline")
                .find(|p| p.contains(&format!("data-series=\"{name}\"")))
                .and_then(|p| p.split("stroke=\"").nth(1))
                .and_then(|rest| rest.split('"').next())
                .map(str::to_owned)
        };
        assert_eq!(
            stroke("Noisy").as_deref(),
            Some(class_colour(PrincipalClass::Noisy))
        );
        assert_eq!(
            stroke("Quiet").as_deref(),
            Some(class_colour(PrincipalClass::Quiet))
        );
        let mut totals = BTreeMap::new();
        totals.insert(0, (PrincipalClass::Noisy, 10.0, 5.0));
        let bars = principal_chart(&totals);
        assert!(bars.contains(&format!("fill=\"{}\"", class_colour(PrincipalClass::Noisy))));
    }
}
