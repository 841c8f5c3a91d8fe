//! `docs/profiles.md` and the OpenAPI `Limits` schema describe every field of
//! `turnstile_admission::Limits`, with the same words.

use std::collections::BTreeSet;
use std::path::Path;

fn repo_text(path: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(path),
    )
    .unwrap()
}

/// The fields serde accepts for `T`, read from its unknown-field error.
fn serde_fields<T: serde::de::DeserializeOwned + std::fmt::Debug>(probe: &str) -> BTreeSet<String> {
    let error = serde_json::from_str::<T>(probe).unwrap_err().to_string();
    let expected = error.split("expected one of").nth(1).unwrap_or_default();
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_limits_field_is_in_the_openapi_schema_and_the_reference_with_the_same_words() {
    let openapi: serde_json::Value =
        serde_json::from_str(&repo_text("crates/server/openapi.json")).unwrap();
    let doc = repo_text("docs/profiles.md");
    let limits = &openapi["components"]["schemas"]["Limits"]["properties"];
    let breaker = &limits["circuitBreaker"]["properties"];
    let documented = |props: &serde_json::Value| -> BTreeSet<String> {
        props.as_object().unwrap().keys().cloned().collect()
    };

    let fields = serde_fields::<turnstile_admission::Limits>(r#"{"concurrency":1,"zz":1}"#);
    assert!(fields.contains("requestsBurst"), "{fields:?}");
    assert_eq!(fields, documented(limits), "Limits and the OpenAPI schema");
    let breaker_fields = serde_fields::<turnstile_admission::CircuitBreakerConfig>(
        r#"{"failureThreshold":1,"zz":1}"#,
    );
    assert_eq!(breaker_fields, documented(breaker), "circuitBreaker");

    for (name, schema) in limits.as_object().unwrap() {
        let description = schema["description"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has no description in openapi.json"));
        assert!(
            doc.contains(&format!("### `{name}`\n\n{description}\n")),
            "docs/profiles.md has no `### {name}` section opening with the OpenAPI description"
        );
    }
    for (name, schema) in breaker.as_object().unwrap() {
        let description = schema["description"].as_str().unwrap();
        assert!(
            doc.contains(&format!("| `{name}` | {description} |")),
            "circuitBreaker.{name}"
        );
    }
}

#[test]
fn the_readme_links_every_doc() {
    let readme = repo_text("README.md");
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    for entry in std::fs::read_dir(docs).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") {
            assert!(
                readme.contains(&format!("docs/{name}")),
                "README.md does not link docs/{name}"
            );
        }
    }
    for client in ["clients/python", "clients/typescript"] {
        assert!(readme.contains(client), "README.md does not show {client}");
    }
}
