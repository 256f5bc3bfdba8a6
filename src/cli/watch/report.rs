//! What one re-plan found, and its JSON line (the schema is documented in `docs/watch.md`).

use crate::apply::ApplyReport;
use crate::core::{LoadError, LoadErrors, Location, ModelName};
use crate::plan::Plan;
use crate::preview::Preview;
use crate::unittest::{Status, TestResult};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};

/// Why a report was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The first plan, when the watch starts.
    Start,
    /// Files changed: the project was reloaded and re-planned.
    Replan,
    /// Something failed before any plan could be made (the config became invalid, the file
    /// watcher failed); with `fatal`, the watch ends (exit 1).
    Error,
}

impl Event {
    fn as_str(self) -> &'static str {
        match self {
            Event::Start => "start",
            Event::Replan => "replan",
            Event::Error => "error",
        }
    }
}

/// One problem shown inline: a load, check, plan, preview, apply or test error.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// Where it comes from: `config`, `load`, `check`, `plan`, `preview`, `apply`, `test`, `watch`.
    pub kind: &'static str,
    /// The file (relative to the project root when inside it), when known.
    pub file: Option<PathBuf>,
    /// The 1-based line, when known.
    pub line: Option<u32>,
    /// The model at fault, when known.
    pub model: Option<ModelName>,
    /// What is wrong.
    pub message: String,
    /// A suggestion.
    pub hint: Option<String>,
}

impl Problem {
    /// A load-shaped diagnostic.
    pub fn from_load(kind: &'static str, e: &LoadError) -> Problem {
        Problem {
            kind,
            file: e.location.as_ref().map(|l| l.file.clone()),
            line: e.location.as_ref().map(|l| l.line).filter(|l| *l > 0),
            model: e.model.clone(),
            message: e.message.clone(),
            hint: e.hint.clone(),
        }
    }

    /// The problems of a failed step: each load error of a [`LoadErrors`] on its own, otherwise
    /// one problem with the file:line of the model at fault when the error knows it.
    pub fn from_error(kind: &'static str, err: &anyhow::Error) -> Vec<Problem> {
        if let Some(errors) = err.chain().find_map(|e| e.downcast_ref::<LoadErrors>()) {
            return errors.0.iter().map(|e| Problem::from_load(kind, e)).collect();
        }
        // Each failure of a parallel apply on its own, with its model's file:line.
        if let Some(crate::apply::ApplyError::Several(all)) = err.chain().find_map(|e| e.downcast_ref::<crate::apply::ApplyError>()) {
            return all.iter().map(|a| Problem::from_apply(kind, a)).collect();
        }
        // A hint the message carries on its own line is the problem's `hint` (as in `error`).
        let (text, hint) = (super::super::error_text(err), super::super::hint_for(err));
        let (message, hint) = super::super::split_hint(&text, hint.as_deref());
        // An invalid configuration: its file (the project root's `efmesh.toml`, as the other
        // files are named relative to the root) and the line TOML names.
        if let Some(c) = err.chain().find_map(|e| e.downcast_ref::<crate::config::ConfigError>()) {
            let (crate::config::ConfigError::Invalid { path, .. } | crate::config::ConfigError::Read { path, .. }) = c;
            return vec![Problem {
                kind,
                file: path.file_name().map(std::path::PathBuf::from),
                line: c.line(),
                model: None,
                message: message.to_string(),
                hint: hint.map(str::to_string),
            }];
        }
        let located: Option<(&Location, &ModelName)> = err.chain().find_map(|e| {
            use crate::apply::ApplyError;
            if let Some(crate::plan::PlanError::Sql { model, location, .. }) = e.downcast_ref() {
                return Some((location, model));
            }
            e.downcast_ref::<ApplyError>().and_then(ApplyError::located)
        });
        vec![Problem {
            kind,
            file: located.map(|(l, _)| l.file.clone()),
            line: located.map(|(l, _)| l.line).filter(|l| *l > 0),
            model: located.map(|(_, m)| m.clone()),
            message: message.to_string(),
            hint: hint.map(str::to_string),
        }]
    }

    /// One failure of a parallel apply ([`crate::apply::ApplyError::Several`]).
    fn from_apply(kind: &'static str, a: &crate::apply::ApplyError) -> Problem {
        use crate::apply::ApplyError;
        let located = a.located();
        let model = located.map(|(_, m)| m.clone()).or_else(|| match a {
            ApplyError::Target { model, .. } => model.clone(),
            ApplyError::Audit { model, .. }
            | ApplyError::RunAudit { model, .. }
            | ApplyError::SharedAudit { model, .. }
            | ApplyError::ReadAudit { reader: model, .. } => Some(model.clone()),
            _ => None,
        });
        Problem {
            kind,
            file: located.map(|(l, _)| l.file.clone()),
            line: located.map(|(l, _)| l.line).filter(|l| *l > 0),
            model,
            message: crate::apply::with_causes(a),
            hint: match a {
                ApplyError::State(s) => s.hint().map(str::to_string),
                _ => None,
            },
        }
    }

    /// `file:line: model `m`: message` (and the hint on its own line).
    pub fn text(&self) -> String {
        let e = LoadError {
            location: self.file.clone().map(|file| Location { file, line: self.line.unwrap_or(0) }),
            model: self.model.clone(),
            message: self.message.clone(),
            hint: self.hint.clone(),
            field: None,
            traceback: None,
        };
        e.to_string()
    }

    fn json(&self) -> Value {
        let mut o = Map::new();
        o.insert("kind".into(), self.kind.into());
        o.insert("file".into(), self.file.as_ref().map_or(Value::Null, |f| f.display().to_string().into()));
        o.insert("line".into(), self.line.map_or(Value::Null, Value::from));
        o.insert("model".into(), self.model.as_ref().map_or(Value::Null, |m| m.to_string().into()));
        o.insert("message".into(), self.message.clone().into());
        if let Some(h) = &self.hint {
            o.insert("hint".into(), h.clone().into());
        }
        Value::Object(o)
    }
}

/// What `--apply` did after a re-plan.
#[derive(Debug, Clone)]
pub enum Applied {
    /// The plan was applied.
    Done(ApplyReport),
    /// The apply failed or was refused (the problem is among the report's errors).
    Failed(String),
}

/// One re-plan: what changed, the plan, the problems, the previews, what was applied and tested.
#[derive(Debug, Clone)]
pub struct Report {
    /// Why it was made.
    pub event: Event,
    /// The watch ends after this report (exit 1).
    pub fatal: bool,
    /// The environment watched.
    pub env: String,
    /// The project root (paths below are relative to it).
    pub root: PathBuf,
    /// Files whose change caused this re-plan, relative to the root, sorted.
    pub changed_files: Vec<PathBuf>,
    /// The configuration was read again.
    pub config_changed: bool,
    /// Script files evaluated by the reload.
    pub evaluated: Vec<PathBuf>,
    /// Models loaded (`None` when the project did not load).
    pub models: Option<usize>,
    /// Models whose version or metadata differs from the last plan (added and removed ones
    /// included): a reformat changes nothing here.
    pub changed_models: Vec<ModelName>,
    /// The plan of the environment, when one could be made.
    pub plan: Option<Plan>,
    /// Every problem, load errors first.
    pub errors: Vec<Problem>,
    /// Previews of the changed models the plan builds.
    pub previews: Vec<Preview>,
    /// Changed models not previewed (beyond the per-re-plan cap).
    pub previews_omitted: usize,
    /// With `--apply`: what the apply did (`None`: nothing to apply, or not asked).
    pub applied: Option<Applied>,
    /// With `--test`: the unit tests run (`None`: not asked, or the project did not load).
    pub tests: Option<Vec<TestResult>>,
    /// Wall-clock time of day when the report was made (`HH:MM:SS`, local time).
    pub at: String,
    /// When the plan was ready, before previews, the apply and tests ran (`planMs`).
    pub plan_ready: Option<std::time::Instant>,
    /// From the latest file event of the batch (as the debouncer received it) to the batch's
    /// delivery: the debounce window and the debouncer's tick (`debounceMs`).
    pub debounced: Option<std::time::Duration>,
    /// Work still under way when the report is shown early (the plan is drawn before the
    /// previews, the apply and the tests it waits for): e.g. `previewing 1 model`.
    pub pending: Option<String>,
}

impl Report {
    /// An empty report of `event`.
    pub fn new(event: Event, env: &str, root: &Path) -> Report {
        Report {
            event,
            fatal: false,
            env: env.to_string(),
            root: root.to_path_buf(),
            changed_files: Vec::new(),
            config_changed: false,
            evaluated: Vec::new(),
            models: None,
            changed_models: Vec::new(),
            plan: None,
            errors: Vec::new(),
            previews: Vec::new(),
            previews_omitted: 0,
            applied: None,
            tests: None,
            at: jiff::ZonedDateTime::now().strftime("%H:%M:%S").to_string(),
            plan_ready: None,
            debounced: None,
            pending: None,
        }
    }

    /// The JSON line: `apiVersion` first, then the fields in the order `docs/watch.md` lists.
    pub fn json(&self, replan_ms: f64) -> Value {
        let paths = |v: &[PathBuf]| v.iter().map(|p| p.display().to_string()).collect::<Vec<_>>();
        let mut o = Map::new();
        o.insert("apiVersion".into(), super::super::printer::API_VERSION.into());
        o.insert("event".into(), self.event.as_str().into());
        if self.fatal {
            o.insert("fatal".into(), true.into());
        }
        o.insert("env".into(), self.env.clone().into());
        o.insert("changedFiles".into(), paths(&self.changed_files).into());
        o.insert("configChanged".into(), self.config_changed.into());
        o.insert("evaluated".into(), paths(&self.evaluated).into());
        o.insert("models".into(), self.models.map_or(Value::Null, Value::from));
        o.insert("changedModels".into(), self.changed_models.iter().map(ToString::to_string).collect::<Vec<_>>().into());
        o.insert("plan".into(), self.plan.as_ref().map_or(Value::Null, plan_json));
        o.insert("errors".into(), self.errors.iter().map(Problem::json).collect::<Vec<_>>().into());
        o.insert("previews".into(), serde_json::to_value(&self.previews).unwrap_or(Value::Null));
        if self.previews_omitted > 0 {
            o.insert("previewsOmitted".into(), self.previews_omitted.into());
        }
        o.insert("applied".into(), self.applied.as_ref().map_or(Value::Null, applied_json));
        o.insert("tests".into(), self.tests.as_ref().map_or(Value::Null, |t| t.iter().map(test_json).collect::<Vec<_>>().into()));
        o.insert("replanMs".into(), ((replan_ms * 10.0).round() / 10.0).into());
        if let Some(d) = self.debounced {
            o.insert("debounceMs".into(), ((d.as_secs_f64() * 10_000.0).round() / 10.0).into());
        }
        Value::Object(o)
    }
}

/// The plan summary: counts, then one entry per model with work to do.
pub fn plan_json(plan: &Plan) -> Value {
    let models: Vec<Value> = plan
        .actions
        .iter()
        .filter(|a| a.has_work())
        .map(|a| {
            let mut m = Map::new();
            m.insert("model".into(), a.name.to_string().into());
            m.insert("kind".into(), a.kind.into());
            m.insert("change".into(), a.change.as_str().into());
            m.insert("build".into(), a.build.into());
            m.insert("fingerprint".into(), a.fingerprint.to_string().into());
            if let Some(p) = &a.previous {
                m.insert("previous".into(), p.to_string().into());
            }
            m.insert("intervals".into(), a.intervals.into());
            m.insert(
                "backfill".into(),
                a.backfill.iter().map(|i| json!([crate::core::interval::to_iso(i.start), crate::core::interval::to_iso(i.end)])).collect::<Vec<_>>().into(),
            );
            Value::Object(m)
        })
        .collect();
    let also: Vec<Value> = plan.also_writes.iter().map(|r| json!({"model": r.model.to_string(), "note": r.note})).collect();
    json!({
        "hasChanges": plan.has_changes,
        "counts": plan.counts(),
        "models": models,
        "alsoWrites": also,
    })
}

fn applied_json(a: &Applied) -> Value {
    match a {
        Applied::Done(r) => json!({
            "ok": true,
            "built": r.built.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "registered": r.registered.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "intervals": r.intervals,
            "promoted": r.promoted,
            "audits": serde_json::to_value(&r.audits).unwrap_or(Value::Null),
        }),
        Applied::Failed(message) => json!({ "ok": false, "error": message }),
    }
}

fn test_json(t: &TestResult) -> Value {
    json!({
        "name": t.name,
        "model": t.model.to_string(),
        "file": t.location.file.display().to_string(),
        "line": t.location.line,
        "status": t.status.as_str(),
        "problems": t.problems,
        "missing": t.diff.missing.len(),
        "unexpected": t.diff.unexpected.len(),
    })
}

/// `passed`/`failed`/`error` counts of `tests`.
pub fn test_counts(tests: &[TestResult]) -> (usize, usize, usize) {
    let count = |s: Status| tests.iter().filter(|t| t.status == s).count();
    (count(Status::Passed), count(Status::Failed), count(Status::Error))
}
