//! Reading a `/metrics` exposition (Prometheus text format 0.0.4) in tests: the sum of a
//! family's samples, all of them or those carrying given labels.
//!
//! Invariant: only sample lines of exactly that family count (`name` or `name{…}`), never a
//! comment or another family that shares the prefix.

/// The sum of the samples of family `name` in `text` whose labels include every
/// `(label, value)` of `labels` (0 when none).
pub fn metric_total(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| line.split([' ', '{']).next() == Some(name))
        .filter(|line| {
            labels
                .iter()
                .all(|(label, value)| line.contains(&format!("{label}=\"{value}\"")))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_is_summed_over_its_samples_and_filtered_by_labels() {
        let text = "# HELP a_total x\n# TYPE a_total counter\na_total{decision=\"admit\",reason=\"ok\"} 3\na_total{decision=\"reject\",reason=\"queue-full\"} 2\na_total_more 9\nb 1\n";
        assert_eq!(metric_total(text, "a_total", &[]), 5.0);
        assert_eq!(metric_total(text, "a_total", &[("decision", "admit")]), 3.0);
        assert_eq!(metric_total(text, "missing", &[]), 0.0);
    }
}
