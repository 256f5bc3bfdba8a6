//! The build scheduler of `apply` and `run` (`--jobs N`): models start when their parents in
//! the working set are built, up to N at once, each on its own engine connection.
//!
//! The calling thread owns the state store and the scheduler, and does every state read and
//! write ([`Builds`]): before a model's engine work (`start`), after each of its transactions
//! commits (`step`: the ledger rows of the time-range batches it wrote), and after the last
//! (`finish`: the snapshot record).
//!
//! Consecutive steps of one job may share one engine transaction (a time-range model's batches,
//! [`Job::group`]): steps join the transaction until its time budget has passed, then it
//! commits, and only then are its steps reported (their ledger rows written together). A
//! transaction that fails is rolled back whole and its steps run again one transaction each, as
//! without grouping, so every step before the failing one commits and is recorded, and the
//! failure is the failing step's own (SPEC §4 invariant 4). Worker threads own one engine connection each ([`crate::engine::Engine::worker`])
//! and run nothing but a model's transactions ([`Job`]), reporting each outcome back over a
//! channel and waiting for the answer that it was recorded before the next transaction; so
//! every state write happens in the same order, per model, as in a sequential apply, always
//! after the engine commit it records, and at most one committed transaction per model is
//! unrecorded at any instant (the calling thread answers between the transactions of a model it
//! builds itself, and while it waits; not during a seed, keyed, SCD type 2 or lake build, which
//! its `start` does whole).
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
//!
//! While several models are under way the engine is told how many ([`Engine::share_threads`]):
//! DuckDB then shrinks its own thread pool by one per extra build, so the build connections'
//! threads and the pool's add up to the pool's size instead of contending for the cores (a
//! statement computes the same rows, up to the order floating-point sums are added in, as with
//! any thread count; docs/benchmark.md, "An idle machine; DuckDB's threads under `--jobs`").

use super::ApplyError;
use super::audit::{self, AuditError, AuditResult};
use crate::core::ModelName;
use crate::core::audit::Audit;
use crate::core::interval::Interval;
use crate::engine::Engine;
use std::collections::BTreeSet;
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

/// The engine work of one model: its steps, in order; the first that fails ends it.
pub(crate) struct Job<'p> {
    /// The model.
    pub model: ModelName,
    /// The steps.
    pub steps: Vec<Step<'p>>,
    /// How long consecutive steps may share one engine transaction: a step joins the open
    /// transaction while less than this has passed since the transaction began, so a killed
    /// process loses at most about this much committed-to-be work (plus one step). Zero: every
    /// step is its own transaction.
    pub group: std::time::Duration,
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
    /// After the steps `first..first + results.len()` of `item`'s job ran: every result but the
    /// last is a success (they committed, in one engine transaction or several); the last is a
    /// success too, or the failure of its step (rolled back).
    ///
    /// # Errors
    /// The step's failure, or what recording them failed on.
    fn step(&mut self, item: usize, first: usize, results: Vec<StepResult>) -> Result<(), ApplyError>;
    /// After every step of `item`'s job committed.
    ///
    /// # Errors
    /// What recording the build failed on.
    fn finish(&mut self, item: usize) -> Result<(), ApplyError>;
}

/// Runs `job`'s steps on `engine`, in order, handing the outcomes of each transaction to `each`
/// (the index of its first step, then one result per step); stops after a failed step or when
/// `each` returns false. Steps share a transaction as [`Job::group`] allows; a shared
/// transaction that fails is rolled back and the job goes on from its first step one
/// transaction per step, so what is reported is what running them one by one reports.
pub(crate) fn run_job(engine: &mut dyn Engine, job: &Job, each: &mut dyn FnMut(usize, Vec<StepResult>) -> bool) {
    // Test hook: widens the window in which a model's build is under way.
    super::fault::delay_point(&format!("build:{}", job.model));
    let n = job.steps.len();
    // Steps whose `backfill batch` line was logged (a step run again after a failed shared
    // transaction is not announced twice).
    let mut announced = 0;
    let mut grouping = !job.group.is_zero();
    let mut i = 0;
    while i < n {
        if grouping && i + 1 < n {
            match shared(engine, job, i, &mut announced) {
                Some(results) => {
                    let next = i + results.len();
                    if !each(i, results.into_iter().map(Ok).collect()) {
                        return;
                    }
                    i = next;
                    continue;
                }
                // Rolled back: from its first step on, one transaction per step.
                None => grouping = false,
            }
        }
        announce(job, i, &mut announced);
        let step = &job.steps[i];
        let result = audit::transaction(engine, &step.statements, &job.model, &step.checks, step.batch);
        let ok = result.is_ok();
        if !each(i, vec![result]) || !ok {
            return;
        }
        i += 1;
    }
}

/// Logs the `backfill batch` line of step `i` of `job` once.
fn announce(job: &Job, i: usize, announced: &mut usize) {
    if i < *announced {
        return;
    }
    *announced = i + 1;
    let step = &job.steps[i];
    if let (Some(batch), Some((k, n))) = (step.batch, step.of) {
        tracing::info!(model = %job.model, interval = %batch, batch = k + 1, batches = n, "backfill batch");
    }
}

/// Runs steps `first..` of `job` in ONE engine transaction, each step's statements then its
/// audits (write-audit-publish: nothing is visible to other connections before the commit),
/// adding steps until [`Job::group`] has passed or the job ends, then commits. Returns each
/// step's audit results, or `None` when any statement, audit, blocking violation or the commit
/// failed: the transaction is then rolled back and nothing of it committed.
fn shared(engine: &mut dyn Engine, job: &Job, first: usize, announced: &mut usize) -> Option<Vec<Vec<AuditResult>>> {
    let began = std::time::Instant::now();
    if engine.begin().is_err() {
        return None;
    }
    let mut results = Vec::new();
    let mut k = first;
    while k < job.steps.len() {
        announce(job, k, announced);
        let step = &job.steps[k];
        match audit::within(engine, &step.statements, &job.model, &step.checks, step.batch) {
            Ok(r) => results.push(r),
            Err(e) => {
                let _ = engine.rollback();
                tracing::debug!(model = %job.model, batch = k + 1, error = %e, "a transaction shared by several batches failed: rolled back, its batches run again one transaction each");
                return None;
            }
        }
        k += 1;
        // Test hook: a process stopped inside a shared transaction, its batches uncommitted.
        super::fault::crash_point(|| format!("in-group:{}:{k}", job.model));
        if began.elapsed() >= job.group {
            break;
        }
    }
    if let Err(e) = engine.commit() {
        tracing::debug!(model = %job.model, error = %e, "the commit of a transaction shared by several batches failed: its batches run again one transaction each");
        return None;
    }
    // Test hook: the batches committed, their ledger rows not written yet.
    super::fault::crash_point(|| format!("group-committed:{}:{k}", job.model));
    tracing::debug!(model = %job.model, batches = k - first, ms = began.elapsed().as_millis() as u64, "batches committed in one transaction");
    Some(results)
}

/// What a worker reports.
enum Report {
    /// A transaction of a work item ran: its first step and one result per step, and where to
    /// answer whether it was recorded (the worker waits for the answer before its next
    /// transaction, and runs none after a `false`).
    Step(usize, usize, Vec<StepResult>, mpsc::SyncSender<bool>),
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
    // No more workers than models they can build, nor than [`MAX_WORKERS`].
    let parallel_items = parallel.iter().filter(|p| **p).count();
    let wanted = if jobs > 1 && parallel_items > 1 { jobs.min(parallel_items).min(MAX_WORKERS) } else { 0 };
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
                inline(b, item, &job, engine, &mut |_| {})?;
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
    let (job_tx, job_rx) = mpsc::channel::<(usize, Job<'p>)>();
    let job_rx = Mutex::new(job_rx);
    let (report_tx, report_rx) = mpsc::channel::<Report>();
    // Workers log through the caller's subscriber (a library caller's or a test's scoped one).
    let dispatch = tracing::dispatcher::get_default(Clone::clone);
    std::thread::scope(|s| {
        // Owned by this closure, so that a panic of the calling thread drops it (and the
        // answers the reports queued in it carry) before the scope waits for the workers: a
        // worker waiting for an answer then reads "not recorded" and stops, instead of the scope
        // waiting for it forever.
        let report_rx = report_rx;
        let mut started = 0;
        for mut worker in workers {
            let (jobs, reports, dispatch) = (&job_rx, report_tx.clone(), dispatch.clone());
            let spawned = std::thread::Builder::new().name("efmesh-build".into()).spawn_scoped(s, move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    // Each committed transaction waits for this thread's answer that it was
                    // recorded before the next one begins: a process stopped at any instant
                    // leaves at most one committed transaction per model unrecorded (SPEC §4
                    // invariant 45), and a model whose record failed runs no further one.
                    loop {
                        let next = match jobs.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => break,
                        };
                        let Ok((item, job)) = next else { break };
                        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            run_job(&mut *worker, &job, &mut |k, rs| {
                                // A channel per report, its sender in the report alone: a report
                                // dropped unanswered (the calling thread unwinding) stops the job.
                                let (ack_tx, ack_rx) = mpsc::sync_channel::<bool>(1);
                                reports.send(Report::Step(item, k, rs, ack_tx)).is_ok() && ack_rx.recv().unwrap_or(false)
                            });
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
            match spawned {
                Ok(_) => started += 1,
                // Fewer workers (their connections dropped with the closure), or none: then
                // every model is built on this connection below.
                Err(e) => tracing::warn!("cannot start a build thread ({e}): building with {started} worker(s)"),
            }
        }
        drop(report_tx);
        let count = started;
        loop {
            while let Ok(r) = report_rx.try_recv() {
                st.handle(r, b);
            }
            if st.failures.is_empty() {
                // Keep the workers busy first, then build what only this connection can.
                let next_parallel = if st.busy < count { st.ready.iter().copied().find(|&i| parallel[i]) } else { None };
                // With no worker started, every model is built here.
                let next_parallel = next_parallel.filter(|_| count > 0);
                if let Some(item) = next_parallel {
                    st.ready.remove(&item);
                    match b.start(item, engine) {
                        Ok(Some(job)) => {
                            if job_tx.send((item, job)).is_ok() {
                                st.busy += 1;
                                // The models under way share the engine's threads.
                                engine.share_threads(st.busy);
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
                if (st.busy < count || count == 0)
                    && let Some(item) = st.ready.iter().copied().find(|&i| !parallel[i] || count == 0)
                {
                    st.ready.remove(&item);
                    let built = match b.start(item, engine) {
                        Ok(Some(job)) => {
                            engine.share_threads(st.busy + 1);
                            // Workers' reports are recorded between this model's transactions
                            // too: each worker waits for its record.
                            inline(b, item, &job, engine, &mut |b| {
                                while let Ok(r) = report_rx.try_recv() {
                                    st.handle(r, b);
                                }
                            })
                        }
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
            // Fewer models under way after a report (and nothing ready): they get the threads back.
            engine.share_threads(st.busy);
            match report_rx.recv() {
                Ok(r) => st.handle(r, b),
                Err(_) => {
                    st.failures.push(lost_workers());
                    break;
                }
            }
        }
        drop(job_tx);
    });
    // Every later statement (the promotion, audits, the next command's) has the threads alone.
    engine.share_threads(0);
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

/// The most worker connections an apply or run opens, whatever `--jobs` says: each is a thread
/// and a connection (a few MB each), and no machine efmesh runs on builds more models at once.
const MAX_WORKERS: usize = 256;

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
    fn handle<'p>(&mut self, r: Report, b: &mut dyn Builds<'p>) {
        match r {
            Report::Step(item, k, results, recorded) => {
                let ok = !self.failed.contains(&item) && {
                    match b.step(item, k, results) {
                        Ok(()) => true,
                        Err(e) => {
                            self.failed.insert(item);
                            self.failures.push(e);
                            false
                        }
                    }
                };
                // The worker waits for this answer (gone only when it stopped).
                let _ = recorded.send(ok);
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

/// Runs `item`'s job on `engine` (this thread), recording each step and then doing `between`
/// (recording the workers' reports meanwhile), then finishes it.
fn inline<'p>(
    b: &mut dyn Builds<'p>,
    item: usize,
    job: &Job<'p>,
    engine: &mut dyn Engine,
    between: &mut dyn FnMut(&mut dyn Builds<'p>),
) -> Result<(), ApplyError> {
    let mut outcome = Ok(());
    run_job(engine, job, &mut |k, rs| {
        outcome = b.step(item, k, rs);
        between(&mut *b);
        outcome.is_ok()
    });
    outcome?;
    b.finish(item)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{DescribedColumn, EngineError, dialect};

    /// An engine whose statements all succeed, with as many worker connections as asked.
    struct Accepting;

    impl Engine for Accepting {
        fn sql(&self) -> &'static dyn dialect::Dialect {
            &dialect::Standard
        }
        fn execute(&mut self, _: &str) -> Result<(), EngineError> {
            Ok(())
        }
        fn transaction(&mut self, _: &[String]) -> Result<(), EngineError> {
            Ok(())
        }
        fn describe(&mut self, _: &str) -> Result<Vec<DescribedColumn>, EngineError> {
            Ok(Vec::new())
        }
        fn query(&mut self, _: &str) -> Result<Vec<Vec<Option<String>>>, EngineError> {
            Ok(Vec::new())
        }
        fn relation_exists(&mut self, _: &str, _: &str) -> Result<bool, EngineError> {
            Ok(false)
        }
        fn worker(&mut self) -> Option<Box<dyn Engine + Send>> {
            Some(Box::new(Accepting))
        }
    }

    /// Builds every item as one step; recording the first step reported panics, after a pause
    /// in which the other worker's report arrives and waits for its answer.
    struct PanicsOnFirstRecord;

    impl Builds<'static> for PanicsOnFirstRecord {
        fn start(&mut self, item: usize, _: &mut dyn Engine) -> Result<Option<Job<'static>>, ApplyError> {
            let model = ModelName::parse(&format!("s.m{item}")).expect("name");
            let step = Step { statements: vec!["SELECT 1".into()], checks: Vec::new(), batch: None, of: None };
            Ok(Some(Job { model, steps: vec![step], group: std::time::Duration::ZERO }))
        }

        fn step(&mut self, item: usize, _: usize, _: Vec<StepResult>) -> Result<(), ApplyError> {
            std::thread::sleep(std::time::Duration::from_millis(300));
            panic!("recording item {item} failed unexpectedly");
        }

        fn finish(&mut self, _: usize) -> Result<(), ApplyError> {
            Ok(())
        }
    }

    #[test]
    fn a_panic_while_recording_a_workers_step_ends_the_apply_instead_of_hanging_it() {
        let scheduling = std::thread::spawn(|| {
            let _ = schedule(&mut PanicsOnFirstRecord, &[Vec::new(), Vec::new()], &[true, true], &mut Accepting, 2);
        });
        // A hang is what this test is for: the scheduler is given a minute to end.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !scheduling.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(scheduling.is_finished(), "the scheduler still waits for a worker a minute after the panic");
        assert!(scheduling.join().is_err(), "the panic reaches the caller");
    }
}
