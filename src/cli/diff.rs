//! `efmesh diff <env-a> <env-b> [--model M,…] [--json]`: which models two environments serve
//! differently, read from the state store alone (no engine): models only `env-b` serves
//! (added), only `env-a` serves (removed), and at another version (the fingerprints differ).
//! Each is described by its pointer in the state store, which is exactly what the environment's
//! views serve (SPEC §4). Comparing the data (`--data`) is not built yet (issue #15).

use super::printer::Printer;
use super::{Exit, load, open_state};
use anyhow::{Result, anyhow};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

/// Prints how `b` differs from `a`; `models` (comma-separated) restricts it to those models.
pub(super) fn run(config: &std::path::Path, a: &str, b: &str, models: Option<&str>, json: bool, out: &Printer) -> Result<Exit> {
    let project = load(config)?;
    for env in [a, b] {
        crate::core::name::validate_env(env)?;
    }
    let state = open_state(&project, false)?;
    let known = state.environments()?;
    for env in [a, b] {
        if !known.iter().any(|k| k == env) {
            let list = if known.is_empty() { "none yet".to_string() } else { known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ") };
            return Err(anyhow!("environment `{env}` was never applied (environments: {list})\n  hint: `efmesh apply {env}` creates it"));
        }
    }
    let (pa, pb) = (state.env_pointers(a)?, state.env_pointers(b)?);
    let wanted: Option<BTreeSet<String>> = match models {
        None => None,
        Some(list) => {
            let mut set = BTreeSet::new();
            for m in list.split(',').map(str::trim).filter(|m| !m.is_empty()) {
                let name = crate::core::ModelName::parse(m)?.to_string();
                if !pa.contains_key(&name) && !pb.contains_key(&name) && project.dag.get(&crate::core::ModelName::parse(m)?).is_none() {
                    let hint = project.dag.suggest(m).map(|s| format!("\n  hint: did you mean `{s}`?")).unwrap_or_default();
                    return Err(anyhow!("unknown model `{m}`: neither environment serves it and the project has no such model{hint}"));
                }
                set.insert(name);
            }
            Some(set)
        }
    };
    let keep = |name: &String| wanted.as_ref().is_none_or(|w| w.contains(name));
    let d = Diff::of(&pa, &pb, keep);
    if json {
        out.json(json!({
            "envA": a,
            "envB": b,
            "added": d.added.iter().map(|(m, fp)| json!({"model": m, "fingerprint": fp})).collect::<Vec<_>>(),
            "removed": d.removed.iter().map(|(m, fp)| json!({"model": m, "fingerprint": fp})).collect::<Vec<_>>(),
            "changed": d.changed.iter().map(|(m, fa, fb)| json!({"model": m, "fingerprintA": fa, "fingerprintB": fb})).collect::<Vec<_>>(),
            "same": d.same,
        }))?;
    } else {
        out.text(&d.text(a, b))?;
    }
    Ok(Exit::Success)
}

/// How the pointers of `b` differ from those of `a`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Diff {
    /// Only `b` serves them: (model, fingerprint).
    added: Vec<(String, String)>,
    /// Only `a` serves them.
    removed: Vec<(String, String)>,
    /// Both serve them, at other versions: (model, fingerprint in a, in b).
    changed: Vec<(String, String, String)>,
    /// Models both serve at one version.
    same: usize,
}

impl Diff {
    fn of(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>, keep: impl Fn(&String) -> bool) -> Diff {
        let mut d = Diff::default();
        let names: BTreeSet<&String> = a.keys().chain(b.keys()).filter(|n| keep(n)).collect();
        for name in names {
            match (a.get(name), b.get(name)) {
                (Some(fa), Some(fb)) if fa == fb => d.same += 1,
                (Some(fa), Some(fb)) => d.changed.push((name.clone(), fa.clone(), fb.clone())),
                (None, Some(fb)) => d.added.push((name.clone(), fb.clone())),
                (Some(fa), None) => d.removed.push((name.clone(), fa.clone())),
                (None, None) => {}
            }
        }
        d
    }

    fn text(&self, a: &str, b: &str) -> String {
        let short = |fp: &str| fp.chars().take(12).collect::<String>();
        let mut s = format!(
            "diff `{a}` → `{b}`: {} only in `{b}`, {} only in `{a}`, {} at another version, {} the same\n",
            self.added.len(),
            self.removed.len(),
            self.changed.len(),
            self.same
        );
        let width = self
            .added
            .iter()
            .map(|(m, _)| m.len())
            .chain(self.removed.iter().map(|(m, _)| m.len()))
            .chain(self.changed.iter().map(|(m, _, _)| m.len()))
            .max()
            .unwrap_or(0);
        for (m, fp) in &self.added {
            s.push_str(&format!("  + {m:<width$}  @{} (only in `{b}`)\n", short(fp)));
        }
        for (m, fp) in &self.removed {
            s.push_str(&format!("  - {m:<width$}  @{} (only in `{a}`)\n", short(fp)));
        }
        for (m, fa, fb) in &self.changed {
            s.push_str(&format!("  ~ {m:<width$}  @{} → @{}\n", short(fa), short(fb)));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_split_into_added_removed_changed_and_same() {
        let a: BTreeMap<String, String> = [("s.a", "1"), ("s.b", "2"), ("s.c", "3")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let b: BTreeMap<String, String> = [("s.b", "2"), ("s.c", "4"), ("s.d", "5")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let d = Diff::of(&a, &b, |_| true);
        assert_eq!(d.added, [("s.d".to_string(), "5".to_string())]);
        assert_eq!(d.removed, [("s.a".to_string(), "1".to_string())]);
        assert_eq!(d.changed, [("s.c".to_string(), "3".to_string(), "4".to_string())]);
        assert_eq!(d.same, 1);
        let only_c = Diff::of(&a, &b, |n| n == "s.c");
        assert_eq!((only_c.added.len(), only_c.removed.len(), only_c.changed.len(), only_c.same), (0, 0, 1, 0));
        assert!(d.text("dev", "prod").starts_with("diff `dev` → `prod`: 1 only in `prod`, 1 only in `dev`, 1 at another version, 1 the same\n"));
    }
}
