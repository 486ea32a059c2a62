//! templates/prometheus/: the alert rules pass `promtool check rules` and their unit tests `promtool test rules`.
use super::run_tool;

#[test]
fn alert_rules_pass_promtool_check() {
    let text = run_tool(
        "promtool",
        &["check", "rules", "templates/prometheus/tenure-alerts.yml"],
    );
    assert!(text.contains("SUCCESS"), "{text}");
}

#[test]
fn alert_rules_pass_their_promtool_unit_tests() {
    let text = run_tool(
        "promtool",
        &[
            "test",
            "rules",
            "templates/prometheus/tenure-alerts.test.yml",
        ],
    );
    assert!(text.contains("SUCCESS"), "{text}");
}

/// Every alert has a section in the runbook, and its `runbook` annotation points at it.
#[test]
fn every_alert_has_a_runbook_section() {
    let rules: yaml_serde::Value =
        yaml_serde::from_str(&super::md::read("templates/prometheus/tenure-alerts.yml")).unwrap();
    let anchors = super::md::anchors(&super::md::read("docs/operations.md"));
    let mut problems = Vec::new();
    let mut n = 0;
    for group in rules["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            let alert = rule["alert"].as_str().unwrap();
            n += 1;
            let want = format!("docs/operations.md#{}", alert.to_lowercase());
            if rule["annotations"]["runbook"].as_str() != Some(want.as_str()) {
                problems.push(format!("{alert}: annotation runbook should be {want:?}"));
            }
            if !anchors.contains(&alert.to_lowercase()) {
                problems.push(format!(
                    "{alert}: no `### {alert}` section in docs/operations.md"
                ));
            }
        }
    }
    assert!(n >= 8, "only {n} alerts");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every metric the rules read is one the agent serves: a renamed metric would silence its alert.
#[tokio::test]
async fn every_metric_the_rules_read_is_served() {
    use super::harness::{primary, settings, with_cluster, Api, NOW};
    let rules = super::md::read("templates/prometheus/tenure-alerts.yml");
    let used: std::collections::BTreeSet<&str> = rules
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| (w.starts_with("patroni_") || w.starts_with("tenure_")) && !w.ends_with('_'))
        .collect();
    assert!(used.len() >= 8, "{used:?}");
    // With a PgBouncer driven: its metrics are served only then.
    let mut p = with_cluster(primary(NOW + 10_000));
    p.status.pooler = Some(tenure::ha::PoolerStatus {
        routed_to: Some(tenure::ha::NodeName::new("pg1")),
        last_error: None,
        failures: 0,
    });
    let api = Api::start(settings(), p).await;
    let (_, body) = api.code(reqwest::Method::GET, "/metrics").await;
    api.shutdown().await;
    let served: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let missing: Vec<&&str> = used.iter().filter(|m| !served.contains(m)).collect();
    assert!(
        missing.is_empty(),
        "metrics the alert rules read that /metrics does not serve: {missing:?}"
    );
}
