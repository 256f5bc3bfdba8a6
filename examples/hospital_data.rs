//! Deterministic generator of the `examples/hospital` data: patient movements of a large
//! hospital (about 1,600 beds, 170 admissions a day) from 2026-01-01 to 2026-06-30 (UTC).
//!
//! ```text
//! cargo run --release --example hospital_data -- examples/hospital/data [SEED]
//! ```
//!
//! Writes `moves.csv` (`move_id,case_id,patient_id,dept,event,moved_at,recorded_at`) into the
//! given directory (the departments themselves are reference data kept by hand in the seed
//! `examples/hospital/seeds/departments.csv`). Standard library only;
//! randomness is a splitmix64 stream from a fixed seed and uses integer arithmetic only, so the
//! same seed gives byte-identical files on every platform.
//!
//! What the data looks like:
//! - every case is one hospital stay of one patient: `admission` into a first department, a few
//!   `transfer`s (a Markov chain over departments), then `discharge` from the last department;
//!   some patients come back for further cases weeks later;
//! - `moved_at` is when the patient moved (UTC, `YYYY-MM-DD HH:MM:SS`); rows after 2026-06-30
//!   are cut, so cases still in the house at the end have no discharge;
//! - `recorded_at` is when the row reached the feed: minutes after `moved_at`, but for about 3 %
//!   of the rows 1-10 days late. The file is in `recorded_at` order (the order a feed delivers);
//!   `move_id` numbers the movements in `moved_at` order;
//! - a little dirt for the staging model to clean: ~0.5 % of department codes in lower case and
//!   ~0.3 % of rows delivered twice (same `move_id`, a later `recorded_at`).

use fs_err::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

/// Default seed: the same seed gives the same files.
pub const SEED: u64 = 0x00E5_3E5B_2026_0101;
/// 2026-01-01T00:00:00Z as Unix seconds.
const START: i64 = 1_767_225_600;
/// 2026-07-01T00:00:00Z as Unix seconds (exclusive end of the data).
const END: i64 = START + 181 * DAY;
const MIN: i64 = 60;
const HOUR: i64 = 3_600;
const DAY: i64 = 86_400;
/// Patients in the catchment; each has one or more cases.
const PATIENTS: u32 = 36_000;
/// How far before START patient histories begin (those earlier cases are not in the feed).
const WARM_UP: i64 = 120 * DAY;
/// Transfers after which a case is discharged whatever the chain says.
const MAX_TRANSFERS: u32 = 6;

/// splitmix64 (Steele, Lea, Flood 2014).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (multiply-shift; the bias is far below anything visible here).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    fn between(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }

    /// Triangular-ish in `lo..=hi` (mean of two uniforms): durations cluster in the middle.
    fn tri(&mut self, lo: i64, hi: i64) -> i64 {
        (self.between(lo, hi) + self.between(lo, hi)) / 2
    }

    /// True with probability `per_mille / 1000`.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    /// Picks an item by integer weight.
    fn pick<T: Copy>(&mut self, weighted: &[(T, u32)]) -> T {
        let total: u32 = weighted.iter().map(|w| w.1).sum();
        let mut r = self.below(u64::from(total)) as u32;
        for &(item, w) in weighted {
            if r < w {
                return item;
            }
            r -= w;
        }
        weighted[weighted.len() - 1].0
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dept {
    Er,
    Icu,
    Surgery,
    Cardio,
    Neuro,
    Therapy,
    Ward,
}

use Dept::*;

impl Dept {
    fn code(self) -> &'static str {
        match self {
            Er => "ER",
            Icu => "ICU",
            Surgery => "SURGERY",
            Cardio => "CARDIO",
            Neuro => "NEURO",
            Therapy => "THERAPY",
            Ward => "WARD",
        }
    }

    /// Length of one stay in this department, in seconds.
    fn stay(self, rng: &mut Rng) -> i64 {
        let (lo, hi) = match self {
            Er => (45 * MIN, 12 * HOUR),
            Icu => (10 * HOUR, 6 * DAY),
            Surgery => (4 * HOUR, 2 * DAY),
            Cardio => (18 * HOUR, 6 * DAY),
            Neuro => (DAY, 8 * DAY),
            Therapy => (2 * DAY, 10 * DAY),
            Ward => (12 * HOUR, 8 * DAY),
        };
        rng.tri(lo, hi)
    }

    /// Where a patient goes after a stay here; `None` = discharge.
    fn next(self, rng: &mut Rng) -> Option<Dept> {
        let table: &[(Option<Dept>, u32)] = match self {
            Er => &[(Some(Icu), 12), (Some(Surgery), 18), (Some(Cardio), 20), (Some(Neuro), 12), (Some(Ward), 30), (None, 8)],
            Icu => &[(Some(Surgery), 15), (Some(Cardio), 22), (Some(Neuro), 15), (Some(Ward), 43), (None, 5)],
            Surgery => &[(Some(Icu), 22), (Some(Ward), 55), (Some(Therapy), 15), (None, 8)],
            Cardio => &[(Some(Icu), 8), (Some(Ward), 30), (Some(Therapy), 22), (None, 40)],
            Neuro => &[(Some(Icu), 8), (Some(Ward), 22), (Some(Therapy), 42), (None, 28)],
            Therapy => &[(Some(Ward), 12), (None, 88)],
            Ward => &[(Some(Therapy), 24), (Some(Icu), 3), (Some(Surgery), 5), (None, 68)],
        };
        rng.pick(table)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Event {
    Admission,
    Transfer,
    Discharge,
}

impl Event {
    fn as_str(self) -> &'static str {
        match self {
            Event::Admission => "admission",
            Event::Transfer => "transfer",
            Event::Discharge => "discharge",
        }
    }
}

/// One generated movement before ids are assigned.
struct Move {
    case: u32,
    patient: u32,
    dept: Dept,
    event: Event,
    moved_at: i64,
}

/// One delivered row of `moves.csv`.
#[derive(Clone, Copy)]
struct Row {
    move_id: u64,
    case: u32,
    patient: u32,
    dept: Dept,
    lower_case_dept: bool,
    event: Event,
    moved_at: i64,
    recorded_at: i64,
}

/// Days since 1970-01-01 to a civil date (Hinnant's algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS` (UTC).
fn fmt_ts(t: i64) -> String {
    let (y, m, d) = civil(t.div_euclid(DAY));
    let s = t.rem_euclid(DAY);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", s / HOUR, s % HOUR / MIN, s % MIN)
}

/// Time of an admission on `day` (Unix seconds of midnight) into `dept`.
fn admission_time(rng: &mut Rng, day: i64, dept: Dept) -> i64 {
    let hour = if dept == Er {
        // Emergencies all day long, busiest from late morning to the evening.
        const HOURS: [u32; 24] = [3, 2, 2, 2, 2, 3, 4, 6, 8, 9, 10, 10, 10, 10, 9, 9, 9, 9, 8, 8, 7, 6, 5, 4];
        let weighted: Vec<(i64, u32)> = HOURS.iter().enumerate().map(|(h, &w)| (h as i64, w)).collect();
        rng.pick(&weighted)
    } else {
        // Planned admissions in the morning.
        rng.between(6, 11)
    };
    day + hour * HOUR + rng.between(0, HOUR - 1)
}

/// The movements of one case admitted at `t0`, and when it ended (discharge time).
fn case_moves(rng: &mut Rng, case: u32, patient: u32, first: Dept, t0: i64, out: &mut Vec<Move>) -> i64 {
    let mut dept = first;
    let mut t = t0;
    out.push(Move { case, patient, dept, event: Event::Admission, moved_at: t });
    let mut transfers = 0;
    loop {
        t += dept.stay(rng);
        let next = if transfers >= MAX_TRANSFERS { None } else { dept.next(rng) };
        match next {
            Some(d) if d != dept => {
                dept = d;
                transfers += 1;
                out.push(Move { case, patient, dept, event: Event::Transfer, moved_at: t });
            }
            Some(_) => {} // stays where it is a while longer
            None => {
                out.push(Move { case, patient, dept, event: Event::Discharge, moved_at: t });
                return t;
            }
        }
    }
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(out_dir) = args.next().map(PathBuf::from) else {
        eprintln!("usage: hospital_data <out_dir> [seed]");
        std::process::exit(2);
    };
    let seed = match args.next() {
        Some(s) => s.parse::<u64>().unwrap_or_else(|_| {
            eprintln!("seed must be an unsigned integer, got `{s}`");
            std::process::exit(2);
        }),
        None => SEED,
    };
    generate(&out_dir, seed)
}

/// Writes `moves.csv` into `out_dir`; the same seed gives a byte-identical file.
pub fn generate(out_dir: &std::path::Path, seed: u64) -> std::io::Result<()> {
    let mut rng = Rng(seed);

    // 1. Cases, patient by patient: a first admission, then maybe readmissions 2-90 days after
    //    each discharge. Histories start up to WARM_UP before the data so that readmissions are
    //    in a steady state; only cases admitted from START on are kept (the feed starts there).
    let mut moves: Vec<Move> = Vec::new();
    let mut case_no: u32 = 0;
    let days = (END - START + WARM_UP) / DAY;
    let mut case = Vec::new();
    for patient in 1..=PATIENTS {
        let cases = rng.pick(&[(1u32, 700), (2, 200), (3, 70), (4, 30)]);
        let mut day = START - WARM_UP + rng.between(0, days - 1) * DAY;
        for _ in 0..cases {
            if day >= END {
                break;
            }
            let weekday = (day / DAY + 3).rem_euclid(7); // 0 = Monday
            let planned = if weekday >= 5 { 3 } else { 15 }; // few planned admissions at weekends
            let first = rng.pick(&[(Er, 55), (Surgery, planned), (Cardio, 12), (Neuro, 8), (Ward, 10)]);
            let t0 = admission_time(&mut rng, day, first);
            case_no += 1;
            case.clear();
            let discharged = case_moves(&mut rng, case_no, patient, first, t0, &mut case);
            if t0 >= START {
                moves.append(&mut case);
            }
            day = (discharged.div_euclid(DAY) + rng.between(2, 90)) * DAY;
        }
    }
    // Only what happened before the end of June is in the feed.
    moves.retain(|m| m.moved_at < END);

    // 2. Case ids in admission order, move ids in movement order.
    let mut admitted: Vec<(i64, u32)> = moves.iter().filter(|m| m.event == Event::Admission).map(|m| (m.moved_at, m.case)).collect();
    admitted.sort_unstable();
    let mut case_id = vec![0u32; case_no as usize + 1];
    for (i, &(_, c)) in admitted.iter().enumerate() {
        case_id[c as usize] = i as u32 + 1;
    }
    moves.sort_by_key(|m| (m.moved_at, case_id[m.case as usize]));

    // 3. Delivery: a recorded_at per row, a few late rows, a little dirt.
    let mut rows: Vec<Row> = Vec::with_capacity(moves.len() + moves.len() / 100);
    for (i, m) in moves.iter().enumerate() {
        let recorded_at = if rng.chance(30) { m.moved_at + rng.between(DAY, 10 * DAY) } else { m.moved_at + rng.between(20, 45 * MIN) };
        let row = Row {
            move_id: i as u64 + 1,
            case: case_id[m.case as usize],
            patient: m.patient,
            dept: m.dept,
            lower_case_dept: rng.chance(5),
            event: m.event,
            moved_at: m.moved_at,
            recorded_at,
        };
        if rng.chance(3) {
            let again = recorded_at + rng.between(HOUR, 2 * DAY);
            rows.push(Row { recorded_at: again, lower_case_dept: false, ..row });
        }
        rows.push(row);
    }
    rows.sort_by_key(|r| (r.recorded_at, r.move_id));

    // 4. Files.
    fs_err::create_dir_all(out_dir)?;
    let mut w = BufWriter::new(File::create(out_dir.join("moves.csv"))?);
    writeln!(w, "move_id,case_id,patient_id,dept,event,moved_at,recorded_at")?;
    for r in &rows {
        let dept = if r.lower_case_dept { r.dept.code().to_ascii_lowercase() } else { r.dept.code().to_string() };
        writeln!(w, "{},C{:06},P{:06},{},{},{},{}", r.move_id, r.case, r.patient, dept, r.event.as_str(), fmt_ts(r.moved_at), fmt_ts(r.recorded_at))?;
    }
    w.flush()?;

    let late = rows.iter().filter(|r| r.recorded_at - r.moved_at >= DAY).count();
    eprintln!(
        "hospital_data: seed {seed}: {} rows ({} movements, {} cases, {} late, {} duplicates) -> {}",
        rows.len(),
        moves.len(),
        admitted.len(),
        late,
        rows.len() - moves.len(),
        out_dir.display()
    );
    Ok(())
}
