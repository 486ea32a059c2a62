//! `tenure edit-config`, patronictl's flow: the `config` key as YAML, changed by `--replace`, `--apply`,
//! `--set`/`--pg`, or in `$EDITOR` when none is given; the diff shown, confirmed, sent as `PATCH /config`.
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use reqwest::Method;
use serde_json::{Map, Value};

use super::control::CONFIG_TIMEOUT;
use super::rest::targets;
use super::{CliError, Ctx};

/// What to change, as patronictl's options give it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EditArgs {
    /// `-s KEY=VALUE`: dotted keys, YAML values, `null` (or nothing) deletes.
    pub set: Vec<String>,
    /// `-p NAME=VALUE`: `-s postgresql.parameters.NAME=VALUE`.
    pub pg: Vec<String>,
    /// `--apply FILE` (`-` is stdin): merged into the config.
    pub apply: Option<String>,
    /// `--replace FILE` (`-` is stdin): the config replaced.
    pub replace: Option<String>,
    /// `-q`: no diff, no "Not changed".
    pub quiet: bool,
    /// `--force`: no question.
    pub force: bool,
}

pub async fn edit_config(ctx: &Ctx, args: &EditArgs) -> Result<(), CliError> {
    let snapshot = ctx.store.read().await?;
    let scope = &ctx.config.scope;
    let Some((config, _)) = snapshot.config.clone() else {
        return Err(CliError::refused(format!(
            "The config key does not exist in the cluster {scope}"
        )));
    };
    let before = super::pyyaml::dump(&config);
    let mut changed = config.clone();
    let mut edited = false;
    if let Some(file) = &args.replace {
        changed = read_yaml(file)?;
        edited = true;
    }
    if let Some(file) = &args.apply {
        crate::agent::control::merge_patch(&mut changed, &read_yaml(file)?);
        edited = true;
    }
    let pairs: Vec<String> = (args.set.iter().cloned())
        .chain(
            args.pg
                .iter()
                .map(|p| format!("postgresql.parameters.{}", p.trim_start())),
        )
        .collect();
    if !pairs.is_empty() {
        changed = apply_sets(&changed, &pairs)?;
        edited = true;
    }
    let after = if edited {
        super::pyyaml::dump(&changed)
    } else {
        let text = invoke_editor(ctx, &before)?;
        changed = parse_yaml(&text, "the edited config")?;
        text
    };
    if !changed.is_object() {
        return Err(CliError::usage(
            "the new config is not a YAML mapping (key: value lines)",
        ));
    }
    if changed == config {
        if !args.quiet {
            println!("Not changed");
        }
        return Ok(());
    }
    if !args.quiet {
        for line in super::diff::unified(&before, &after) {
            println!("{line}");
        }
    }
    let from_stdin = [&args.apply, &args.replace]
        .iter()
        .any(|f| f.as_deref() == Some("-"));
    if from_stdin && !args.force {
        println!("Use --force option to apply changes");
        return Ok(());
    }
    // On a terminal, patronictl's question; without one (scripts, Ansible) the change goes ahead, as
    // `tenure edit-config --set` always did (docs/differences.md).
    if !args.force && std::io::stdin().is_terminal() {
        super::prompt::confirm("Apply these changes?", false)?;
    }
    // Only what changed is sent: a concurrent change to another key is kept, not overwritten.
    let patch = merge_patch_between(&config, &changed);
    let leader = snapshot
        .cluster
        .leader_name()
        .map(|n| n.as_str().to_string());
    let to = targets(&snapshot, leader.as_deref());
    ctx.rest
        .first_reachable(&to, Method::PATCH, "/config", Some(&patch), CONFIG_TIMEOUT)
        .await?
        .accepted("edit-config")?;
    println!("Configuration changed");
    Ok(())
}

/// patronictl's `apply_config_changes`: each `dotted.key=yaml` set in a copy of `config`; a `null` (or
/// empty) value deletes the key and any section it leaves empty; below `postgresql.parameters` the rest of
/// the key is one name (GUCs may hold dots).
pub fn apply_sets(config: &Value, pairs: &[String]) -> Result<Value, CliError> {
    let mut out = config.clone();
    for pair in pairs {
        let bad = |why: &str| CliError::usage(format!("--set {pair:?}: {why}"));
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| bad("expected KEY=VALUE"))?;
        let path: Vec<String> = key.trim().split('.').map(str::to_string).collect();
        if path.iter().any(String::is_empty) {
            return Err(bad("the key has an empty part"));
        }
        let value: Value = if value.trim().is_empty() {
            Value::Null
        } else {
            yaml_serde::from_str(value).map_err(|e| bad(&format!("not a YAML value: {e}")))?
        };
        if !out.is_object() {
            out = Value::Object(Map::new());
        }
        if let Value::Object(root) = &mut out {
            set_path(root, &path, value, &[]);
        }
    }
    Ok(out)
}

fn set_path(config: &mut Map<String, Value>, path: &[String], value: Value, prefix: &[String]) {
    let joined;
    let path = if prefix == ["postgresql", "parameters"] {
        joined = [path.join(".")];
        &joined[..]
    } else {
        path
    };
    let key = &path[0];
    if path.len() == 1 {
        match value {
            Value::Null => config.remove(key),
            v => config.insert(key.clone(), v),
        };
        return;
    }
    let child = config
        .entry(key.clone())
        .or_insert_with(|| Value::Object(Map::new()));
    if !child.is_object() {
        *child = Value::Object(Map::new());
    }
    if let Value::Object(m) = child {
        let mut deeper = prefix.to_vec();
        deeper.push(key.clone());
        set_path(m, &path[1..], value, &deeper);
        if m.is_empty() {
            config.remove(key);
        }
    }
}

/// The JSON merge patch (RFC 7386, `PATCH /config`) that turns `before` into `after`: changed keys, removed
/// ones as `null`, sections compared key by key.
pub fn merge_patch_between(before: &Value, after: &Value) -> Value {
    let (Value::Object(b), Value::Object(a)) = (before, after) else {
        return after.clone();
    };
    let mut patch = Map::new();
    for (k, av) in a {
        match b.get(k) {
            Some(bv) if bv == av => {}
            Some(bv) if bv.is_object() && av.is_object() => {
                patch.insert(k.clone(), merge_patch_between(bv, av));
            }
            _ => {
                patch.insert(k.clone(), av.clone());
            }
        }
    }
    for k in b.keys().filter(|k| !a.contains_key(*k)) {
        patch.insert(k.clone(), Value::Null);
    }
    Value::Object(patch)
}

fn parse_yaml(text: &str, what: &str) -> Result<Value, CliError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    yaml_serde::from_str(text).map_err(|e| CliError::usage(format!("{what} is not YAML: {e}")))
}

/// `--apply`/`--replace` FILE, `-` being stdin.
fn read_yaml(file: &str) -> Result<Value, CliError> {
    let text = if file == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(file)
    }
    .map_err(|e| CliError::usage(format!("cannot read {file}: {e}")))?;
    parse_yaml(&text, file)
}

/// patronictl's `invoke_editor`: `$EDITOR` (else `editor`, else `vi` on `$PATH`) on a private temporary
/// `<scope>-config-*.yaml` holding `before`; its text once the editor exits 0.
fn invoke_editor(ctx: &Ctx, before: &str) -> Result<String, CliError> {
    let env = &ctx.env;
    let editor = match env.get("EDITOR").filter(|e| !e.trim().is_empty()) {
        Some(e) => e.clone(),
        None => ["editor", "vi"]
            .iter()
            .find_map(|name| on_path(env.get("PATH").map(String::as_str), name))
            .map(|p| p.display().to_string())
            .ok_or_else(|| {
                CliError::usage(
                    "EDITOR environment variable is not set. editor or vi are not available \
                     (or give --set KEY=VALUE, --pg NAME=VALUE, --apply FILE or --replace FILE)",
                )
            })?,
    };
    let dir = PathBuf::from(env.get("TMPDIR").map_or("/tmp", String::as_str));
    let file = TempFile::create(&dir, &ctx.config.scope.replace('/', "_"), before)?;
    // Through the shell, as git runs it: EDITOR may carry arguments (`code --wait`).
    let status = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("tenure-edit-config")
        .arg(&file.0)
        .status()
        .map_err(|e| CliError::internal(format!("cannot run the editor {editor}: {e}")))?;
    if !status.success() {
        return Err(CliError::refused(format!(
            "Editor exited with return code {}",
            status.code().unwrap_or(-1)
        )));
    }
    std::fs::read_to_string(&file.0)
        .map_err(|e| CliError::internal(format!("cannot read {}: {e}", file.0.display())))
}

fn on_path(path: Option<&str>, name: &str) -> Option<PathBuf> {
    path?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// A file only its owner reads (the config may hold credentials), removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn create(dir: &Path, scope: &str, text: &str) -> Result<TempFile, CliError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let nanos = (crate::clock::wall_ns() % 1_000_000_000) as u32;
        for attempt in 0..100u32 {
            let name = format!(
                "{scope}-config-{}-{:x}.yaml",
                std::process::id(),
                nanos.wrapping_add(attempt)
            );
            let path = dir.join(name);
            // create_new: never follows or reuses a file someone else put there.
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(mut f) => {
                    let file = TempFile(path);
                    f.write_all(text.as_bytes()).map_err(|e| {
                        CliError::internal(format!("cannot write {}: {e}", file.0.display()))
                    })?;
                    return Ok(file);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(CliError::internal(format!(
                        "cannot create a temporary file in {}: {e}",
                        dir.display()
                    )))
                }
            }
        }
        Err(CliError::internal(format!(
            "cannot create a temporary file in {}",
            dir.display()
        )))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sets(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sets_nest_dotted_keys_delete_on_null_and_keep_guc_names_whole() {
        let config = json!({"loop_wait": 10, "pause": true, "postgresql": {"parameters": {"work_mem": "4MB"}}});
        let out = apply_sets(
            &config,
            &sets(&[
                "loop_wait=5",
                "postgresql.parameters.work_mem=8MB",
                "postgresql.parameters.auto_explain.log_min_duration=1s",
                "postgresql.use_pg_rewind=true",
                "pause=null",
            ]),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"loop_wait": 5, "postgresql": {"use_pg_rewind": true, "parameters":
                   {"work_mem": "8MB", "auto_explain.log_min_duration": "1s"}}})
        );
        // The last parameter deleted takes its empty sections with it, as in patronictl.
        let gone = apply_sets(
            &out,
            &sets(&[
                "postgresql.parameters.work_mem=",
                "postgresql.parameters.auto_explain.log_min_duration=null",
            ]),
        )
        .unwrap();
        assert_eq!(
            gone,
            json!({"loop_wait": 5, "postgresql": {"use_pg_rewind": true}})
        );
        assert!(apply_sets(&config, &sets(&["novalue"])).is_err());
        assert!(apply_sets(&config, &sets(&["a..b=1"])).is_err());
    }

    #[test]
    fn the_patch_holds_only_what_changed() {
        let before = json!({"ttl": 30, "loop_wait": 10, "pause": true,
                            "postgresql": {"parameters": {"work_mem": "4MB", "max_connections": 100}}});
        let after = json!({"ttl": 30, "loop_wait": 5,
                           "postgresql": {"parameters": {"work_mem": "8MB", "max_connections": 100}}});
        let patch = merge_patch_between(&before, &after);
        assert_eq!(
            patch,
            json!({"loop_wait": 5, "pause": null, "postgresql": {"parameters": {"work_mem": "8MB"}}})
        );
        let mut applied = before.clone();
        crate::agent::control::merge_patch(&mut applied, &patch);
        assert_eq!(applied, after);
    }
}
