//! The build scheduler of `apply` and `run` (`--jobs N`): models start when their parents in
//! the working set are built, up to N at once, each on its own engine connection.
//!
//! The calling thread owns the state store and the scheduler, and does every state read and
//! write ([`Builds`]): before a model's engine work (`start`), after each of its transactions
//! commits (`step`: a time-range batch's ledger rows), and after the last (`finish`: the snapshot
//! record). Worker threads own one engine connection each ([`crate::engine::Engine::worker`])
//! and run nothing but a model's transactions ([`Job`]), reporting each outcome back over a
//! channel; so every state write happens in the same order, per model, as in a sequential
//! apply, and always after the engine commit it records.
//!
//! Work whose engine state is local to the calling thread's connection (seeds read a temporary
//! stage, upserts and SCD type 2 a temporary stage table, lake and DuckLake targets their own
//! attachments) runs on the calling thread's connection, one at a time, while workers run the
//! rest.
//!
//! On the first failure no new model starts; the ones running finish (and their successes are
//! recorded); every failure is returned ([`super::ApplyError::Several`] when more than one).
//! With one job (or an engine offering no second connection) the models are built one after
//! another in the order of the plan, on the calling thread's connection: the sequential apply.

use super::ApplyError;
use super::audit::{self, AuditError, AuditResult};
use crate::core::ModelName;
use crate::core::audit::Audit;
use crate::core::interval::Interval;
use crate::engine::Engine;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, mpsc};

/// One transaction of a model's build: statements, then the audits that guard them
/// (write-audit-publish, [`audit::transaction`]).
pub(crate) struct Step<'p> {
    /// The statements, in order.
    pub statements: Vec<String>,
    /// The audits run inside the transaction, each with the relation it sees.
    pub checks: Vec<(&'p Audit, String)>,
    /// The batch written, for a time-range model.
    pub batch: Option<Interval>,
    /// `(index, count)` of the batch, for the `backfill batch` line.
    pub of: Option<(usize, usize)>,
}

/// The engine work of one model: its transactions, in order; the first that fails ends it.
pub(crate) struct Job<'p> {
    /// The model.
    pub model: ModelName,
    /// The transactions.
    pub steps: Vec<Step<'p>>,
}

/// The outcome of one step of a job.
pub(crate) type StepResult = Result<Vec<AuditResult>, AuditError>;

/// The state side of a build, called on the thread that owns the state store.
pub(crate) trait Builds<'p> {
    /// Everything before the engine work of work item `item` (state reads and writes, the
    /// `build start` line), and the whole build of work done on the calling thread's connection
    /// alone; `None` when nothing is left to run (the model is then done), else its transactions.
    ///
    /// # Errors
    /// What stopped the model.
    fn start(&mut self, item: usize, engine: &mut dyn Engine) -> Result<Option<Job<'p>>, ApplyError>;
    /// After step `step` of `item`'s job ran (committed, or failed and rolled back).
    ///
    /// # Errors
    /// The step's failure, or what recording it failed on.
    fn step(&mut self, item: usize, step: usize, result: StepResult) -> Result<(), ApplyError>;
    /// After every step of `item`'s job committed.
    ///
    /// # Errors
    /// What recording the build failed on.
    fn finish(&mut self, item: usize) -> Result<(), ApplyError>;
}

/// Runs `job`'s steps on `engine`, in order, handing each outcome to `each`; stops after a
/// failed step or when `each` returns false.
pub(crate) fn run_job(engine: &mut dyn Engine, job: &Job, each: &mut dyn FnMut(usize, StepResult) -> bool) {
    // Test hook: widens the window in which a model's build is under way.
    super::fault::delay_point(&format!("build:{}", job.model));
    for (i, step) in job.steps.iter().enumerate() {
        if let (Some(batch), Some((k, n))) = (step.batch, step.of) {
            tracing::info!(model = %job.model, interval = %batch, batch = k + 1, batches = n, "backfill batch");
        }
        let result = audit::transaction(engine, &step.statements, &job.model, &step.checks, step.batch);
        let ok = result.is_ok();
        if !each(i, result) || !ok {
            return;
        }
    }
}

/// What a worker reports.
enum Report {
    /// A step of a work item ran.
    Step(usize, usize, StepResult),
    /// A work item's job ended (every step ran, or one failed).
    End(usize),
    /// The worker stopped unexpectedly while running the item of this model.
    Lost(usize, ModelName),
}

/// Builds the work items `0..deps.len()` (in the plan's order; `deps[i]` lists the earlier items
/// item `i` reads, directly or through models outside the working set), up to `jobs` at once.
/// Items whose `parallel[i]` is false run on `engine` (the calling thread's connection).
///
/// # Errors
/// Every failure, as described in the module docs.
pub(crate) fn schedule<'p>(b: &mut dyn Builds<'p>, deps: &[Vec<usize>], parallel: &[bool], engine: &mut dyn Engine, jobs: usize) -> Result<(), ApplyError> {
    let n = deps.len();
    let wanted = if jobs > 1 && parallel.iter().filter(|p| **p).count() > 1 { jobs } else { 0 };
    let mut workers: Vec<Box<dyn Engine + Send>> = Vec::new();
    for _ in 0..wanted {
        match engine.worker() {
            Some(w) => workers.push(w),
            None => break,
        }
    }
    if workers.is_empty() {
        // Sequential: the plan's order, the first failure stops.
        for item in 0..n {
            if let Some(job) = b.start(item, engine)? {
                inline(b, item, &job, engine)?;
            }
        }
        return Ok(());
    }
    tracing::debug!(workers = workers.len(), "building in parallel");
    let mut st = Progress { children: vec![Vec::new(); n], waiting: deps.iter().map(Vec::len).collect(), ..Progress::default() };
    for (i, ds) in deps.iter().enumerate() {
        for &d in ds {
            st.children[d].push(i);
        }
    }
    st.ready = (0..n).filter(|&i| st.waiting[i] == 0).collect();
    let count = workers.len();
    let (job_tx, job_rx) = mpsc::channel::<(usize, Job<'p>)>();
    let job_rx = Mutex::new(job_rx);
    let (report_tx, report_rx) = mpsc::channel::<Report>();
    // Per item, set by this thread when recording one of its steps failed: its worker runs no
    // further step of it (at most the step under way commits unrecorded, as after a kill, and
    // the next apply computes it again).
    let stopped: Vec<AtomicBool> = (0..n).map(|_| AtomicBool::new(false)).collect();
    // Workers log through the caller's subscriber (a library caller's or a test's scoped one).
    let dispatch = tracing::dispatcher::get_default(Clone::clone);
    std::thread::scope(|s| {
        for mut worker in workers {
            let (jobs, reports, stopped, dispatch) = (&job_rx, report_tx.clone(), &stopped, dispatch.clone());
            s.spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    loop {
                        let next = match jobs.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => break,
                        };
                        let Ok((item, job)) = next else { break };
                        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            run_job(&mut *worker, &job, &mut |k, r| reports.send(Report::Step(item, k, r)).is_ok() && !stopped[item].load(Ordering::SeqCst));
                        }));
                        // A worker that panicked may hold a transaction open: it takes no more work.
                        let lost = ran.is_err();
                        let end = if lost { Report::Lost(item, job.model.clone()) } else { Report::End(item) };
                        if reports.send(end).is_err() || lost {
                            break;
                        }
                    }
                })
            });
        }
        drop(report_tx);
        loop {
            while let Ok(r) = report_rx.try_recv() {
                st.handle(r, b, &stopped);
            }
            if st.failures.is_empty() {
                // Keep the workers busy first, then build what only this connection can.
                let next_parallel = if st.busy < count { st.ready.iter().copied().find(|&i| parallel[i]) } else { None };
                if let Some(item) = next_parallel {
                    st.ready.remove(&item);
                    match b.start(item, engine) {
                        Ok(Some(job)) => {
                            if job_tx.send((item, job)).is_ok() {
                                st.busy += 1;
                            } else {
                                st.failures.push(lost_workers());
                            }
                        }
                        Ok(None) => st.complete(item),
                        Err(e) => st.failures.push(e),
                    }
                    continue;
                }
                // Built on this connection while fewer than `count` workers are busy: at most
                // `jobs` models are under way at once.
                if st.busy < count
                    && let Some(item) = st.ready.iter().copied().find(|&i| !parallel[i])
                {
                    st.ready.remove(&item);
                    let built = match b.start(item, engine) {
                        Ok(Some(job)) => inline(b, item, &job, engine),
                        Ok(None) => Ok(()),
                        Err(e) => Err(e),
                    };
                    match built {
                        Ok(()) => st.complete(item),
                        Err(e) => st.failures.push(e),
                    }
                    continue;
                }
            }
            if st.busy == 0 {
                break;
            }
            match report_rx.recv() {
                Ok(r) => st.handle(r, b, &stopped),
                Err(_) => {
                    st.failures.push(lost_workers());
                    break;
                }
            }
        }
        drop(job_tx);
    });
    let mut failures = st.failures;
    // The same failure met by several models (a lost lease, a busy store) is reported once.
    let mut seen = std::collections::HashSet::new();
    failures.retain(|f| seen.insert(f.to_string()));
    if failures.is_empty() && st.done < n {
        // Cannot happen with dependencies on earlier items only; refused rather than reported done.
        failures.push(ApplyError::Target {
            model: None,
            interval: None,
            message: format!("internal error: {} of {n} models were never scheduled", n - st.done),
        });
    }
    match failures.len() {
        0 => Ok(()),
        1 => Err(failures.remove(0)),
        _ => Err(ApplyError::Several(failures)),
    }
}

fn lost_workers() -> ApplyError {
    ApplyError::Target { model: None, interval: None, message: "every build worker stopped unexpectedly".to_string() }
}

/// The scheduler's bookkeeping.
#[derive(Default)]
struct Progress {
    /// The items reading each item.
    children: Vec<Vec<usize>>,
    /// Per item, its dependencies not done yet.
    waiting: Vec<usize>,
    /// Items whose dependencies are all done, not started.
    ready: BTreeSet<usize>,
    /// Items done.
    done: usize,
    /// Jobs sent to workers and not ended.
    busy: usize,
    /// Items that failed.
    failed: BTreeSet<usize>,
    /// Every failure, in the order met.
    failures: Vec<ApplyError>,
}

impl Progress {
    /// `item` is built: its children whose dependencies are all done become ready.
    fn complete(&mut self, item: usize) {
        self.done += 1;
        for &c in &self.children[item] {
            self.waiting[c] -= 1;
            if self.waiting[c] == 0 {
                self.ready.insert(c);
            }
        }
    }

    /// Records what a worker reported.
    fn handle<'p>(&mut self, r: Report, b: &mut dyn Builds<'p>, stopped: &[AtomicBool]) {
        match r {
            Report::Step(item, k, result) => {
                if !self.failed.contains(&item)
                    && let Err(e) = b.step(item, k, result)
                {
                    stopped[item].store(true, Ordering::SeqCst);
                    self.failed.insert(item);
                    self.failures.push(e);
                }
            }
            Report::End(item) => {
                self.busy -= 1;
                if !self.failed.contains(&item) {
                    match b.finish(item) {
                        Ok(()) => self.complete(item),
                        Err(e) => self.failures.push(e),
                    }
                }
            }
            Report::Lost(item, model) => {
                self.busy -= 1;
                self.failed.insert(item);
                self.failures.push(ApplyError::Target {
                    model: Some(model),
                    interval: None,
                    message:
                        "the worker building it stopped unexpectedly (an internal error); its last transaction is not recorded, the next apply builds what is not"
                            .to_string(),
                });
            }
        }
    }
}

/// Runs `item`'s job on `engine` (this thread), recording each step, then finishes it.
fn inline<'p>(b: &mut dyn Builds<'p>, item: usize, job: &Job<'p>, engine: &mut dyn Engine) -> Result<(), ApplyError> {
    let mut outcome = Ok(());
    run_job(engine, job, &mut |k, r| {
        outcome = b.step(item, k, r);
        outcome.is_ok()
    });
    outcome?;
    b.finish(item)
}
