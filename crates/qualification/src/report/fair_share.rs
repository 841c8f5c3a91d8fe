//! The HTML report's section on token-fair scheduling: present only when the record has the
//! fair-share or the deadline A/B block (a manifest that shapes the order, such as v3-tokens).
//!
//! Per principal (by its position in the manifest, never its ID): band, scheduling weight,
//! grants and tokens, tokens while its band was jointly backlogged, and the weighted share
//! against the weights' (a bar around 1); per band: grants, share, the contended share against
//! `minShare`, p99 and maximum queue delay, Jain's index; then the A/B's refusals.
//!
//! Invariant: a pure function of the record's observations; every number is printed as the
//! record holds it.

use std::fmt::Write;

use crate::observations::Observations;

fn optional(value: Option<f64>) -> String {
    value.map_or_else(|| "—".to_owned(), |v| format!("{v}"))
}

/// The section, or an empty string when the record has neither block.
pub(super) fn section(o: &Observations) -> String {
    let mut html = String::new();
    if let Some(fair) = &o.fair_share {
        let modes: Vec<&str> = fair
            .provider_fairness
            .iter()
            .map(|f| match f {
                turnstile_admission::Fairness::Requests => "requests",
                turnstile_admission::Fairness::Tokens => "tokens",
            })
            .collect();
        let _ = write!(
            html,
            r#"<h2>Token-fair scheduling</h2><p>Provider lanes fair in: {}. "Backlogged" counts only grants made while every principal of the band had a waiter on the lane; the weighted share is (backlogged tokens ÷ weight) ÷ the band's mean, 1 being exactly the weights' share.</p>"#,
            modes.join(", ")
        );
        html.push_str(r#"<table class="fair-principals"><thead><tr><th scope="col">Principal</th><th scope="col">Band</th><th scope="col">Weight</th><th scope="col">Grants</th><th scope="col">Tokens</th><th scope="col">Backlogged tokens</th><th scope="col">Weighted share</th></tr></thead><tbody>"#);
        for p in &fair.principals {
            let share = p.weighted_share_error.map(|e| 1.0 + e);
            let bar = share.map_or(String::new(), |s| {
                format!(
                    r##" <svg width="120" height="10" aria-hidden="true"><rect width="{:.1}" height="10" fill="#0b5cad"/><line x1="60" x2="60" y1="0" y2="10" stroke="#1a1f24"/></svg>"##,
                    (s * 60.0).clamp(0.0, 120.0)
                )
            });
            let _ = write!(
                html,
                r#"<tr data-principal="{}"><th scope="row">#{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td data-share="{}">{}{bar}</td></tr>"#,
                p.principal,
                p.principal,
                p.band.as_str(),
                p.weight,
                p.grants,
                p.tokens,
                p.backlogged_tokens,
                optional(share),
                share.map_or_else(|| "—".to_owned(), |s| format!("{s:.4}")),
            );
        }
        html.push_str("</tbody></table>");
        html.push_str(r#"<table class="fair-bands"><thead><tr><th scope="col">Band</th><th scope="col">Principals</th><th scope="col">Grants (share)</th><th scope="col">Contended share / minShare</th><th scope="col">p99 / max queue delay (ms)</th><th scope="col">Jain (weighted tokens)</th></tr></thead><tbody>"#);
        for b in &fair.bands {
            let _ = write!(
                html,
                r#"<tr data-band="{band}"><th scope="row">{band}</th><td>{}</td><td>{} ({})</td><td>{} / {} of {} grants</td><td>{} / {}</td><td>{}</td></tr>"#,
                b.principals,
                b.grants,
                b.grant_share,
                b.contended_grant_share,
                b.min_share,
                b.contended_grants,
                b.p99_queue_delay_ms,
                b.maximum_queue_delay_ms,
                optional(b.jain_index),
                band = b.band.as_str(),
            );
        }
        html.push_str("</tbody></table>");
    }
    if let Some(d) = &o.deadline_refusals {
        let _ = write!(
            html,
            r#"<h2>Deadline refusals (A/B)</h2><dl class="deadline-ab"><dt>Refused deadline-unreachable (this run, B)</dt><dd>{}</dd><dt>False refusals (admitted by their deadline in A, refusals off)</dt><dd class="false-refusals">{}</dd><dt>Run A: completed · shed</dt><dd>{} · {}</dd></dl>"#,
            d.refused, d.false_refusals, d.completed_without_refusals, d.shed_without_refusals
        );
    }
    html
}
