//! `tenure history` and `tenure show-config`: the `history` and `config` keys as the store holds them.
use serde_json::{json, Value};

use super::pyyaml;
use super::table::{Align, Table};
use super::{CliError, Ctx, Format};

const HISTORY_COLUMNS: [&str; 5] = ["TL", "LSN", "Reason", "Timestamp", "New Leader"];

pub async fn history(ctx: &Ctx, format: Format) -> Result<(), CliError> {
    let snapshot = ctx.store.read().await?;
    let lines = history_lines(snapshot.history.as_ref());
    // patronictl's keys, every one kept (a missing cell is ""), in `json` and `yaml` alike.
    let objects = || -> Vec<Value> {
        let v = lines.iter().map(|cells| {
            let o = HISTORY_COLUMNS.iter().zip(cells);
            Value::Object(o.map(|(k, c)| (k.to_string(), c.clone())).collect())
        });
        v.collect()
    };
    match format {
        Format::Json => println!("{}", Value::Array(objects())),
        // patronictl's `click.echo` adds a blank line to PyYAML's text.
        Format::Yaml => println!("{}", pyyaml::dump(&Value::Array(objects()))),
        Format::Tsv => {
            let rows: Vec<Vec<String>> =
                lines.iter().map(|l| l.iter().map(text).collect()).collect();
            print!("{}", super::table::tsv(&HISTORY_COLUMNS, &rows));
        }
        Format::Table | Format::Topology => {
            let mut table = Table::new(&[
                ("TL", Align::Right),
                ("LSN", Align::Right),
                ("Reason", Align::Left),
                ("Timestamp", Align::Left),
                ("New Leader", Align::Left),
            ]);
            for cells in &lines {
                table.row(cells.iter().map(text).collect());
            }
            print!("{}", table.render(None));
        }
    }
    Ok(())
}

/// Each `[tl, lsn, reason, timestamp?, new_leader?]` line as five cells (missing ones `""`, as patronictl
/// fills them).
fn history_lines(history: Option<&Value>) -> Vec<Vec<Value>> {
    let Some(lines) = history.and_then(Value::as_array) else {
        return Vec::new();
    };
    lines
        .iter()
        .map(|line| {
            let cells = line
                .as_array()
                .cloned()
                .unwrap_or_else(|| vec![line.clone()]);
            (0..HISTORY_COLUMNS.len())
                .map(|i| cells.get(i).cloned().unwrap_or(json!("")))
                .collect()
        })
        .collect()
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub async fn show_config(ctx: &Ctx) -> Result<(), CliError> {
    let snapshot = ctx.store.read().await?;
    let Some((config, _)) = snapshot.config else {
        return Err(CliError::refused(format!(
            "the store at {} holds no config key for cluster {}",
            ctx.store.address, ctx.config.scope
        )));
    };
    // As patronictl prints it (`click.echo` adds the blank line).
    println!("{}", pyyaml::dump(&config));
    Ok(())
}
