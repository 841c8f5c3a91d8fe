//! Token-fair scheduling over real sockets (issue 31): the service on a loopback port, HTTP
//! admissions and releases, and `GET …/fairness` showing tokens served, weights, bands and
//! each lane's fairness mode.

use serde_json::{json, Value};
use turnstile_testkit::TestServer;

const WORKSPACE: &str = "tf";

fn fairness(server: &TestServer, key: &str) -> Value {
    server.get_json(&format!("/v1/workspaces/{WORKSPACE}/fairness"), key)
}

fn row<'a>(view: &'a Value, principal: &str) -> &'a Value {
    view["principals"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["principalId"] == principal))
        .unwrap_or_else(|| panic!("no row for {principal}: {view}"))
}

/// Admits one call of `principal` on `provider` estimated at `tokens` (none: no estimate) and
/// releases it reporting `used` tokens (none: no usage).
fn call(server: &TestServer, key: &str, provider: &str, tokens: Option<u64>, used: Option<u64>) {
    let estimate = tokens.map_or(json!({}), |t| json!({ "tokens": t }));
    let lease = server.granted_lease(
        key,
        &json!({"providerId": provider, "budgetId": "b", "estimate": estimate, "deadlineMs": 0}),
    );
    let mut release = json!({"outcome": "success"});
    if let Some(used) = used {
        release["actualUsage"] = json!({ "tokens": used });
    }
    assert_eq!(server.release(key, &lease, &release).status(), 200);
}

#[test]
fn the_fairness_answer_counts_tokens_served_and_names_weights_bands_and_modes() {
    let server = TestServer::start_fresh(|_| {});
    let admin = server.admin();
    let profile = json!({
        "workspace": {"concurrency": 8},
        "providers": {
            "lane": {"concurrency": 4, "fairness": "tokens"},
            "plain": {"concurrency": 4}
        },
        "principals": {
            "light": {"concurrency": 4, "weight": 2, "priority": "interactive"},
            "heavy": {"concurrency": 4}
        }
    });
    assert_eq!(
        server
            .put_profile(&admin, WORKSPACE, "v1", &profile)
            .status(),
        201
    );
    let (light, heavy) = (
        server.new_key(WORKSPACE, "light"),
        server.new_key(WORKSPACE, "heavy"),
    );
    // Estimated 4,000, used 1,000: the actual tokens replace the estimate.
    call(&server, &heavy, "lane", Some(4_000), Some(1_000));
    // Estimated 400, no usage reported: the estimate stands.
    call(&server, &light, "lane", Some(400), None);
    // No estimate, 50 used.
    call(&server, &light, "plain", None, Some(50));

    let view = fairness(&server, &admin);
    assert_eq!(view["totalGrants"], 3, "{view}");
    assert_eq!(view["totalTokens"], 1_450, "{view}");
    assert_eq!(view["unattributedTokens"], 0);
    let by_minute: u64 = view["minutes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(by_minute, 1_450);
    let (l, h) = (row(&view, "light"), row(&view, "heavy"));
    assert_eq!(
        (l["tokens"].as_u64(), h["tokens"].as_u64()),
        (Some(450), Some(1_000))
    );
    assert!((h["tokenShare"].as_f64().unwrap() - 1_000.0 / 1_450.0).abs() < 1e-9);
    assert_eq!(
        (l["weight"].as_f64(), h["weight"].as_f64()),
        (Some(2.0), Some(1.0))
    );
    assert_eq!(
        (l["priority"].as_str(), h["priority"].as_str()),
        (Some("interactive"), Some("standard"))
    );
    assert_eq!(
        view["providers"],
        json!([
            {"providerId": "lane", "fairness": "tokens"},
            {"providerId": "plain", "fairness": "requests"}
        ])
    );

    // A principal key: the totals, the lanes and its own row with its weight, no other ID.
    let own = fairness(&server, &light);
    assert_eq!(own["totalTokens"], 1_450);
    assert_eq!(own["principals"].as_array().map(Vec::len), Some(1));
    assert_eq!(row(&own, "light")["weight"], 2.0);
    assert!(!own.to_string().contains("heavy"), "{own}");
}
