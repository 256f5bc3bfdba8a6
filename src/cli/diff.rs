//! `efmesh diff <env-a> <env-b> [--model M,…] [--data [--sample P]] [--json]`: which models two
//! environments serve differently, read from the state store alone (no engine): models only
//! `env-b` serves (added), only `env-a` serves (removed), and at another version (the
//! fingerprints differ). Each is described by its pointer in the state store, which is what the
//! environment's views serve (SPEC §4) but while a promotion of it is recorded as under way
//! (interrupted — a crash, `kill -9` — or still running): its views may then serve the versions
//! it was promoting to until the next command that reads views undoes it, which the report says
//! (`promotionsUnderWay`). With `--data`, how the data of each model both serve differs,
//! read-only on the engine ([`crate::datadiff`]).

use super::printer::Printer;
use super::{Exit, UsageError, load, open_state, open_state_records};
use crate::core::Model;
use anyhow::{Result, anyhow};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

/// What `efmesh diff` was asked.
pub(super) struct Request<'a> {
    /// The environment compared from.
    pub a: &'a str,
    /// The environment compared to.
    pub b: &'a str,
    /// `--model`: comma-separated model names.
    pub models: Option<&'a str>,
    /// `--data`: compare the data too.
    pub data: bool,
    /// `--sample P`, as typed.
    pub sample: Option<&'a str>,
    /// `--json`.
    pub json: bool,
}

/// `--sample`'s percent: a whole number from 1 to 99 (anything else: a [`UsageError`]).
fn parse_sample(text: &str) -> Result<u8> {
    match text.trim().parse::<u8>() {
        Ok(p) if (1..=99).contains(&p) => Ok(p),
        _ => Err(anyhow!(UsageError("--sample expects a percent from 1 to 99".to_string()))),
    }
}

/// Prints how `b` differs from `a`; `models` (comma-separated) restricts it to those models.
pub(super) fn run(config: &std::path::Path, req: Request<'_>, out: &Printer) -> Result<Exit> {
    let (a, b) = (req.a, req.b);
    let sample = req.sample.map(parse_sample).transpose()?;
    if sample.is_some() && !req.data {
        return Err(anyhow!(UsageError("--sample samples the data comparison: use it with --data".to_string())));
    }
    let project = load(config)?;
    for env in [a, b] {
        crate::core::name::validate_env(env)?;
    }
    // Without `--data` no engine is opened, so an interrupted promotion is not undone: its
    // environment's views may serve other versions than its pointers, which the report says
    // below. `--data`, which reads the views, undoes one first (and needs the engine for it).
    let state = if req.data { open_state(&project, false)? } else { open_state_records(&project)? };
    let known = state.environments()?;
    for env in [a, b] {
        if !known.iter().any(|k| k == env) {
            let list = if known.is_empty() { "none yet".to_string() } else { known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ") };
            // An environment the janitor dropped has a journal that says so.
            let what = match super::envlife::dropped_at(&*state, env)? {
                Some(at) => super::envlife::dropped_phrase(&at),
                None => "was never applied".to_string(),
            };
            return Err(anyhow!(UsageError(format!("environment `{env}` {what} (environments: {list})\n  hint: `efmesh apply {env}` creates it"))));
        }
    }
    let (pa, pb) = (state.env_pointers(a)?, state.env_pointers(b)?);
    let wanted: Option<BTreeSet<String>> = match req.models {
        None => None,
        Some(list) => {
            let mut set = BTreeSet::new();
            for m in list.split(',').map(str::trim).filter(|m| !m.is_empty()) {
                let name = crate::core::ModelName::parse(m)?.to_string();
                if !pa.contains_key(&name) && !pb.contains_key(&name) && project.dag.get(&crate::core::ModelName::parse(m)?).is_none() {
                    let hint = project.dag.suggest(m).map(|s| format!("\n  hint: did you mean `{s}`?")).unwrap_or_default();
                    return Err(anyhow!(UsageError(format!("unknown model `{m}`: neither environment serves it and the project has no such model{hint}"))));
                }
                set.insert(name);
            }
            Some(set)
        }
    };
    let keep = |name: &String| wanted.as_ref().is_none_or(|w| w.contains(name));
    let under_way = UnderWay::of(&*state, a, b, &pa, &pb, wanted.as_ref())?;
    let d = Diff::of(&pa, &pb, keep);
    let data = if req.data {
        let models = data_models(&project, a, b, &pa, &pb, wanted.as_ref())?;
        Some(crate::datadiff::diff_data(&project, &*state, a, b, &models, sample)?)
    } else {
        None
    };
    // Served by both but gone from the project: their columns (and key) are unknown here, so
    // `--data` cannot compare them; said, not left out silently.
    let not_compared: Vec<&String> = if req.data {
        pa.keys().filter(|n| pb.contains_key(*n) && keep(n) && crate::core::ModelName::parse(n).ok().and_then(|m| project.dag.get(&m)).is_none()).collect()
    } else {
        Vec::new()
    };
    if req.json {
        let mut report = json!({
            "envA": a,
            "envB": b,
            "added": d.added.iter().map(|(m, fp)| json!({"model": m, "fingerprint": fp})).collect::<Vec<_>>(),
            "removed": d.removed.iter().map(|(m, fp)| json!({"model": m, "fingerprint": fp})).collect::<Vec<_>>(),
            "changed": d.changed.iter().map(|(m, fa, fb)| json!({"model": m, "fingerprintA": fa, "fingerprintB": fb})).collect::<Vec<_>>(),
            "same": d.same,
            "promotionsUnderWay": under_way.iter().map(|u| json!({"env": u.env, "startedAt": u.started_at, "models": u.models})).collect::<Vec<_>>(),
        });
        if let Some(data) = &data {
            report["data"] = serde_json::to_value(data)?;
            report["dataNotCompared"] = not_compared.iter().map(|m| json!({"model": m, "reason": "not in the project"})).collect();
        }
        out.json(report)?;
    } else {
        let mut text = d.text(a, b);
        for u in &under_way {
            text.push_str(&u.text());
        }
        if let Some(data) = &data {
            text.push_str(&crate::datadiff::text(a, b, data));
            if !not_compared.is_empty() {
                let list: Vec<String> = not_compared.iter().map(|m| format!("`{m}`")).collect();
                text.push_str(&format!("data not compared: {} (served by both, no longer in the project: its columns are not known here)\n", list.join(", ")));
            }
        }
        out.text(&text)?;
    }
    Ok(Exit::Success)
}

/// A promotion of a compared environment recorded as under way
/// ([`crate::state::PendingPromotion`]): interrupted (a crash, `kill -9` after its views moved)
/// or still running. Its views may serve the versions it was promoting to rather than the
/// pointers compared, until it completes or the next command that reads views undoes it.
struct UnderWay {
    /// The environment being promoted.
    env: String,
    /// When the promotion started.
    started_at: String,
    /// The models whose version it was promoting to differs from the pointer compared.
    models: Vec<String>,
}

impl UnderWay {
    /// The promotions of `a` and `b` recorded as under way (`pa`, `pb`: their pointers). With
    /// `wanted` (`--model`), only the models asked for are listed, and a promotion changing none
    /// of them is left out: what the views of the others serve is not compared.
    fn of(
        state: &dyn crate::state::StateStore,
        a: &str,
        b: &str,
        pa: &BTreeMap<String, String>,
        pb: &BTreeMap<String, String>,
        wanted: Option<&BTreeSet<String>>,
    ) -> Result<Vec<UnderWay>> {
        let mut out = Vec::new();
        for p in state.pending_promotions()? {
            let pointers = if p.env == a {
                pa
            } else if p.env == b {
                pb
            } else {
                continue;
            };
            let names: BTreeSet<&String> = p.pointers.keys().chain(pointers.keys()).collect();
            let models: Vec<String> =
                names.into_iter().filter(|n| p.pointers.get(*n) != pointers.get(*n) && wanted.is_none_or(|w| w.contains(*n))).cloned().collect();
            if wanted.is_some() && models.is_empty() {
                continue;
            }
            out.push(UnderWay { env: p.env, started_at: p.started_at, models });
        }
        Ok(out)
    }

    /// The warning line of the text report.
    fn text(&self) -> String {
        let env = &self.env;
        let models =
            if self.models.is_empty() { String::new() } else { format!(" ({})", self.models.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")) };
        format!(
            "warning: a promotion of `{env}` started at {} is recorded as under way (interrupted, or still running): `{env}`'s views may serve other versions than its pointers compared here{models} until the next command undoes the interrupted promotion (`efmesh status {env}` does; `efmesh apply {env}` promotes again)\n",
            self.started_at
        )
    }
}

/// The models whose data `--data` compares, in topological order: those both environments
/// serve that have data of their own (not external, not embedded), restricted to `wanted`; a
/// wanted model that is not such a model is a [`UsageError`] naming it.
fn data_models<'p>(
    project: &'p crate::project::Project,
    a: &str,
    b: &str,
    pa: &BTreeMap<String, String>,
    pb: &BTreeMap<String, String>,
    wanted: Option<&BTreeSet<String>>,
) -> Result<Vec<&'p Model>> {
    if let Some(wanted) = wanted {
        for name in wanted {
            let Some(model) = crate::core::ModelName::parse(name).ok().and_then(|n| project.dag.get(&n)) else {
                return Err(anyhow!(UsageError(format!("--data: model `{name}` is not in the project: its data cannot be compared"))));
            };
            let missing: Vec<&str> = [(a, pa), (b, pb)].iter().filter(|(_, p)| !p.contains_key(name)).map(|(env, _)| *env).collect();
            if !missing.is_empty() {
                let list = missing.iter().map(|e| format!("`{e}`")).collect::<Vec<_>>().join(" and ");
                return Err(anyhow!(UsageError(format!(
                    "--data: model `{name}` is not served by both environments ({list} does not serve it): there is nothing to compare it with\n  hint: `efmesh apply {}` builds it",
                    missing[0]
                ))));
            }
            if !crate::datadiff::has_data(model) {
                return Err(anyhow!(UsageError(format!("--data: model `{name}` is an {} model: it has no data of its own to compare", model.kind.tag()))));
            }
        }
    }
    Ok(project
        .dag
        .models()
        .filter(|m| {
            let name = m.name.to_string();
            pa.contains_key(&name) && pb.contains_key(&name) && crate::datadiff::has_data(m) && wanted.is_none_or(|w| w.contains(&name))
        })
        .collect())
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
        if a == b {
            return format!("`{a}` and `{b}` are one environment: nothing to compare ({} models)\n", self.same);
        }
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
        let same = Diff::of(&a, &a, |_| true);
        assert_eq!(same.text("dev", "dev"), "`dev` and `dev` are one environment: nothing to compare (3 models)\n");
    }
}
