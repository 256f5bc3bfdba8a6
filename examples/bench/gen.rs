//! Deterministic generator of N-model efmesh projects for `examples/bench.rs`.
//!
//! Layout written under `dir`:
//! - `data/events.parquet` (`--events` rows, 6 weeks from 2026-01-01 UTC), `data/customers.csv`
//!   (5,000 rows), `data/products.parquet` (500 rows): three external roots;
//! - `models/lNN/fNNNNN.lua`: 1–4 models per file, layer `NN` in schema `lNN`;
//! - `efmesh.toml` with the defaults.
//!
//! Every model has one of three output shapes, so any model can read any earlier one of a
//! compatible shape:
//! - `A` row-level events: `event_id bigint, event_at timestamp, customer_id integer,
//!   product_id integer, region varchar, amount double`;
//! - `B` keyed aggregate: `k varchar, n bigint, total double`;
//! - `D` daily aggregate: `day timestamp, k varchar, n bigint, total double` (time column `day`).
//!
//! Models of layer `l` read 1–3 models of earlier layers (70 % of picks from layer `l - 1`) with
//! filters, joins and aggregations. About 10 % are `incremental_by_time_range` (daily, start
//! 2026-01-01, end 2026-02-12 = 42 intervals, batch size 7, 14 or 30), ~3 % `embedded`, ~20 %
//! `view`, the rest `full`. Chains of views/embedded models are capped so that no body inlines
//! more than a few of them. Randomness is splitmix64 from a fixed seed: same N, same seed, same
//! project, byte for byte.
//!
//! [`Sql::Postgres`] writes the same DAG (the same random draws, models, kinds and parents) for
//! the Postgres engine: `[engine] url_env = "EFMESH_BENCH_PG_ENGINE_URL"` in `efmesh.toml`, the
//! three roots as externals naming tables (`src.events`, `src.customers`, `src.products`, which
//! the bench loads from `data/*.csv`), and Postgres spellings where DuckDB's differ: `GROUP BY`
//! ordinals for `GROUP BY ALL`, `round` over `numeric` (Postgres has no `round(double, int)`),
//! `double precision` for `double`, and every reference aliased (Postgres 15 refuses an
//! unnamed subquery in `FROM`, which an embedded model's inlined body is). [`Sql::DuckDb`]
//! writes exactly what it wrote before.

use std::fmt::Write as _;
use std::path::Path;

/// Interval range of every time-range model and of the data.
pub const START: &str = "2026-01-01";
/// Exclusive end: 42 daily intervals.
pub const END: &str = "2026-02-12";
const DAYS: i64 = 42;
const CUSTOMERS: i64 = 5_000;
const PRODUCTS: i64 = 500;
const REGIONS: i64 = 12;
const CATEGORIES: i64 = 20;
/// Max number of view/embedded models a body may inline transitively.
const MAX_INLINE: u32 = 6;

/// The SQL dialect of a generated project (and the engine it runs on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sql {
    /// DuckDB, the default engine: externals read `data/*.parquet` and `data/customers.csv`.
    #[default]
    DuckDb,
    /// Postgres (`[engine] url_env`): externals name the tables of [`PG_SOURCES`].
    Postgres,
}

/// The variable naming the Postgres engine database of a [`Sql::Postgres`] project.
pub const PG_ENGINE_URL_ENV: &str = "EFMESH_BENCH_PG_ENGINE_URL";

/// The source tables of a [`Sql::Postgres`] project: (table, column definitions, CSV file under
/// `data/`, with a header line). The bench creates and fills them before timing anything.
pub const PG_SOURCES: [(&str, &str, &str); 3] = [
    ("src.events", "event_id bigint, event_at timestamp, customer_id integer, product_id integer, amount double precision", "events.csv"),
    ("src.customers", "customer_id integer, region varchar, segment varchar", "customers.csv"),
    ("src.products", "product_id integer, category varchar, price double precision", "products.csv"),
];

/// The external roots of a DuckDB project (a Postgres project names tables instead).
const RAW_DUCKDB: &str = r#"-- External roots (generated data).
define_model {
  name = "raw.events",
  kind = kind.external { path = "data/events.parquet" },
  schema = { { "event_id", "bigint" }, { "event_at", "timestamp" }, { "customer_id", "integer" }, { "product_id", "integer" }, { "amount", "double" } },
}
define_model {
  name = "raw.customers",
  kind = kind.external { path = "data/customers.csv" },
  schema = { { "customer_id", "integer" }, { "region", "varchar" }, { "segment", "varchar" } },
}
define_model {
  name = "raw.products",
  kind = kind.external { path = "data/products.parquet" },
  schema = { { "product_id", "integer" }, { "category", "varchar" }, { "price", "double" } },
}
"#;

/// What a generated project contains.
#[derive(Debug, Default, Clone)]
pub struct Summary {
    pub models: usize,
    pub files: usize,
    pub layers: usize,
    pub full: usize,
    pub view: usize,
    pub embedded: usize,
    pub incremental: usize,
    pub events: i64,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as usize) as i64
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    A,
    B,
    D,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum K {
    Full,
    View,
    Embedded,
    Incr(u32),
}

#[derive(Debug, Clone)]
struct Gen {
    name: String,
    layer: usize,
    shape: Shape,
    /// View/embedded models this one inlines when read (itself included), 0 for tables.
    inline: u32,
}

const EVENTS: &str = "raw.events";
const CUSTOMERS_M: &str = "raw.customers";
const PRODUCTS_M: &str = "raw.products";

fn schema_of(shape: Shape, sql: Sql) -> String {
    let schema = match shape {
        Shape::A => {
            r#"{ { "event_id", "bigint" }, { "event_at", "timestamp" }, { "customer_id", "integer" }, { "product_id", "integer" }, { "region", "varchar" }, { "amount", "double" } }"#
        }
        Shape::B => r#"{ { "k", "varchar" }, { "n", "bigint" }, { "total", "double" } }"#,
        Shape::D => r#"{ { "day", "timestamp" }, { "k", "varchar" }, { "n", "bigint" }, { "total", "double" } }"#,
    };
    match sql {
        Sql::DuckDb => schema.to_string(),
        Sql::Postgres => schema.replace("\"double\"", "\"double precision\""),
    }
}

/// `sql` with every reference marker (`§i`) not followed by an alias given one (`AS s<i>`).
fn alias_refs(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut rest = sql;
    while let Some(i) = rest.find('§') {
        let after = i + '§'.len_utf8() + 1;
        out.push_str(&rest[..after]);
        if !rest[after..].starts_with(" AS ") {
            let _ = write!(out, " AS s{}", &rest[i + '§'.len_utf8()..after]);
        }
        rest = &rest[after..];
    }
    out.push_str(rest);
    out
}

/// Renders SQL whose `§0`, `§1`, `§2` markers stand for `ref(parents[i])` as a Lua expression.
fn lua_query(sql: &str, parents: &[String]) -> String {
    let mut out = String::new();
    let mut rest = sql;
    let mut first = true;
    let mut push = |out: &mut String, piece: &str| {
        if !first {
            out.push_str(" .. ");
        }
        first = false;
        out.push_str(piece);
    };
    while let Some(i) = rest.find('§') {
        let text = &rest[..i];
        if !text.is_empty() {
            push(&mut out, &format!("[==[\n{text}]==]"));
        }
        let digit = rest[i + '§'.len_utf8()..].chars().next().expect("marker digit");
        let idx = digit.to_digit(10).expect("digit") as usize;
        push(&mut out, &format!("ref(\"{}\")", parents[idx]));
        rest = &rest[i + '§'.len_utf8() + 1..];
    }
    if !rest.is_empty() {
        push(&mut out, &format!("[==[\n{rest}]==]"));
    }
    out
}

struct Pools {
    models: Vec<Gen>,
    /// Per shape (A, B, D), indexes into `models` in push order, so layers never decrease.
    by_shape: [Vec<usize>; 3],
    /// Model name → (index into `models`, position in its shape's list).
    index: std::collections::HashMap<String, (usize, usize)>,
}

fn shape_slot(shape: Shape) -> usize {
    match shape {
        Shape::A => 0,
        Shape::B => 1,
        Shape::D => 2,
    }
}

impl Pools {
    fn push(&mut self, g: Gen) {
        let list = &mut self.by_shape[shape_slot(g.shape)];
        self.index.insert(g.name.clone(), (self.models.len(), list.len()));
        list.push(self.models.len());
        self.models.push(g);
    }

    fn get(&self, name: &str) -> Option<&Gen> {
        self.index.get(name).map(|(i, _)| &self.models[*i])
    }

    /// Picks a model of `shape` from layers before `layer` (70 % from `layer - 1` when it has
    /// one), avoiding `taken`. Candidates are the models of `shape` in push order, so those of
    /// earlier layers are a prefix of its list and those of `layer - 1` the end of that prefix;
    /// a pick costs O(log n), not a scan, so 10 000-model projects generate quickly.
    fn pick(&self, rng: &mut Rng, shape: Shape, layer: usize, taken: &[String]) -> Option<Gen> {
        let list = &self.by_shape[shape_slot(shape)];
        let end = list.partition_point(|&i| self.models[i].layer < layer);
        let prev_start = list[..end].partition_point(|&i| self.models[i].layer + 1 < layer);
        // Positions (in `list`) of the taken models of this shape, sorted.
        let mut excluded: Vec<usize> =
            taken.iter().filter_map(|t| self.index.get(t)).filter(|(i, _)| self.models[*i].shape == shape).map(|(_, p)| *p).collect();
        excluded.sort_unstable();
        let excluded_in = |lo: usize, hi: usize| excluded.iter().filter(|p| (lo..hi).contains(*p)).count();
        // The k-th position in `lo..hi` that is not excluded.
        let kth = |lo: usize, k: usize| {
            let mut pos = lo + k;
            for &e in excluded.iter().filter(|e| **e >= lo) {
                if e <= pos {
                    pos += 1;
                }
            }
            pos
        };
        let cands = end - excluded_in(0, end);
        if cands == 0 {
            return None;
        }
        let prev = (end - prev_start) - excluded_in(prev_start, end);
        let pos = if prev > 0 && rng.unit() < 0.7 { kth(prev_start, rng.below(prev)) } else { kth(0, rng.below(cands)) };
        Some(self.models[list[pos]].clone())
    }
}

/// Writes a project of `n` models and its data under `dir`. With `one_batch`, every time-range
/// model declares a `batch_size` covering its whole range (backfilled in one batch, as the
/// floor runs it) instead of 7, 14 or 30 days; the project is otherwise the same.
pub fn generate(dir: &Path, n: usize, events: i64, seed: u64, one_batch: bool, sql: Sql) -> anyhow::Result<Summary> {
    fs_err::create_dir_all(dir.join("data"))?;
    fs_err::create_dir_all(dir.join("models"))?;
    write_data(dir, events, sql)?;
    let toml = "# generated by examples/bench.rs\n[project]\nmodels = [\"models/**/*.lua\"]\n";
    let raw = match sql {
        Sql::DuckDb => {
            fs_err::write(dir.join("efmesh.toml"), toml)?;
            RAW_DUCKDB.to_string()
        }
        Sql::Postgres => {
            fs_err::write(dir.join("efmesh.toml"), format!("{toml}\n[engine]\nurl_env = \"{PG_ENGINE_URL_ENV}\"\n"))?;
            RAW_DUCKDB
                .replace("path = \"data/events.parquet\"", "table = \"src.events\"")
                .replace("path = \"data/customers.csv\"", "table = \"src.customers\"")
                .replace("path = \"data/products.parquet\"", "table = \"src.products\"")
                .replace("\"double\"", "\"double precision\"")
        }
    };
    fs_err::write(dir.join("models/raw.lua"), raw)?;

    let mut rng = Rng(seed ^ (n as u64).wrapping_mul(0x0100_0000_01B3));
    // Deeper DAGs for larger projects: 4 layers at 100 models, 6 at 500, 11 at 2000.
    let layers = ((n as f64).sqrt() / 4.0).round().clamp(4.0, 12.0) as usize;
    let mut pools = Pools { models: Vec::new(), by_shape: [Vec::new(), Vec::new(), Vec::new()], index: std::collections::HashMap::new() };
    let mut summary = Summary { models: n, layers, events, ..Summary::default() };
    let mut files: Vec<(String, String)> = Vec::new();
    let mut i = 0;
    while i < n {
        let per_file = 1 + rng.below(4);
        let layer = 1 + i * layers / n;
        let path = format!("models/l{layer:02}/f{i:05}.lua");
        let mut text = format!("-- generated: layer {layer}\n");
        let mut j = 0;
        while j < per_file && i < n && 1 + i * layers / n == layer {
            let (model, lua) = one_model(&mut rng, &pools, i, layer, one_batch, sql);
            match lua.1 {
                K::Full => summary.full += 1,
                K::View => summary.view += 1,
                K::Embedded => summary.embedded += 1,
                K::Incr(_) => summary.incremental += 1,
            }
            text.push_str(&lua.0);
            // A layer's models only see earlier layers, so push after generating the file.
            pools.push(model);
            i += 1;
            j += 1;
        }
        files.push((path, text));
    }
    summary.files = files.len();
    for (path, text) in files {
        let p = dir.join(path);
        fs_err::create_dir_all(p.parent().expect("parent"))?;
        fs_err::write(p, text)?;
    }
    Ok(summary)
}

/// One model: its pool entry and (Lua text, kind).
fn one_model(rng: &mut Rng, pools: &Pools, i: usize, layer: usize, one_batch: bool, dialect: Sql) -> (Gen, (String, K)) {
    let name = format!("l{layer:02}.m{i:05}");
    let incremental = rng.unit() < 0.10;
    let shape = if incremental {
        Shape::D
    } else {
        match rng.unit() {
            x if x < 0.30 => Shape::A,
            x if x < 0.65 => Shape::B,
            _ => Shape::D,
        }
    };
    let mut kind = if incremental {
        K::Incr([7, 14, 30][rng.below(3)])
    } else {
        match rng.unit() {
            x if x < 0.03 => K::Embedded,
            x if x < 0.25 => K::View,
            _ => K::Full,
        }
    };
    let (sql, parents) = body(rng, pools, shape, layer, matches!(kind, K::Incr(_)), dialect);
    let sql = if dialect == Sql::Postgres { alias_refs(&sql) } else { sql };
    let parent_inline: u32 = parents.iter().filter_map(|p| pools.get(p)).map(|m| m.inline).sum();
    if matches!(kind, K::View | K::Embedded) && parent_inline + 1 > MAX_INLINE {
        kind = K::Full;
    }
    let inline = if matches!(kind, K::View | K::Embedded) { parent_inline + 1 } else { 0 };
    let kind_lua = match kind {
        K::Full => "kind.full()".to_string(),
        K::View => "kind.view()".to_string(),
        K::Embedded => "kind.embedded()".to_string(),
        K::Incr(b) => {
            let b = if one_batch { 100_000 } else { b };
            format!("kind.incremental_by_time_range {{ time_column = \"day\", start = \"{START}\", [\"end\"] = \"{END}\", grain = \"day\", batch_size = {b} }}")
        }
    };
    let mut lua = String::new();
    let _ = write!(
        lua,
        "\ndefine_model {{\n  name = \"{name}\",\n  kind = {kind_lua},\n  schema = {},\n  query = {},\n}}\n",
        schema_of(shape, dialect),
        lua_query(&sql, &parents)
    );
    (Gen { name, layer, shape, inline }, (lua, kind))
}

/// SQL (with `§i` markers) and parents for a model of `shape` at `layer`.
fn body(rng: &mut Rng, pools: &Pools, shape: Shape, layer: usize, incremental: bool, dialect: Sql) -> (String, Vec<String>) {
    // Spellings that differ: `GROUP BY ALL` (its columns by position on Postgres) and
    // `round(x, 2)` of a double (Postgres rounds `numeric` only; cast back to a double).
    let pg = dialect == Sql::Postgres;
    let group_all = |ordinals: &str| if pg { format!("GROUP BY {ordinals}") } else { "GROUP BY ALL".to_string() };
    let round2 = |x: &str| if pg { format!("CAST(round(CAST({x} AS numeric), 2) AS double precision)") } else { format!("round({x}, 2)") };
    let (m, r) = {
        let m = rng.range(2, 6);
        (m, rng.range(0, m - 1))
    };
    let f = 0.5 + rng.below(100) as f64 / 50.0;
    let tfilter = |col: &str| format!("{col} >= @start AND {col} < @end");
    if layer == 1 {
        let ev = EVENTS.to_string();
        return match shape {
            Shape::A => (
                format!(
                    "\nSELECT e.event_id, e.event_at, e.customer_id, e.product_id, c.region, e.amount * {f} AS amount\n\
                     FROM §0 AS e\nJOIN §1 AS c ON c.customer_id = e.customer_id\nWHERE e.customer_id % {m} = {r}\n"
                ),
                vec![ev, CUSTOMERS_M.into()],
            ),
            Shape::B if rng.unit() < 0.5 => (
                format!(
                    "\nSELECT p.category AS k, count(*) AS n, sum(e.amount) AS total\nFROM §0 AS e\n\
                     JOIN §1 AS p ON p.product_id = e.product_id\nWHERE e.product_id % {m} = {r}\nGROUP BY p.category\n"
                ),
                vec![ev, PRODUCTS_M.into()],
            ),
            Shape::B => (
                format!(
                    "\nSELECT c.segment || '-' || c.region AS k, count(*) AS n, {} AS total\nFROM §0 AS e\n\
                     JOIN §1 AS c ON c.customer_id = e.customer_id\nWHERE e.event_id % {m} = {r}\n{}\n",
                    round2("sum(e.amount)"),
                    group_all("1")
                ),
                vec![ev, CUSTOMERS_M.into()],
            ),
            Shape::D => {
                let w = if incremental { tfilter("e.event_at") } else { format!("e.product_id % {m} = {r}") };
                (
                    format!(
                        "\nSELECT date_trunc('day', e.event_at) AS day, c.region AS k, count(*) AS n, sum(e.amount) AS total\n\
                         FROM §0 AS e\nJOIN §1 AS c ON c.customer_id = e.customer_id\nWHERE {w}\n{}\n",
                        group_all("1, 2")
                    ),
                    vec![ev, CUSTOMERS_M.into()],
                )
            }
        };
    }
    let mut taken: Vec<String> = Vec::new();
    let pick = |rng: &mut Rng, s: Shape, taken: &mut Vec<String>| -> Option<String> {
        let g = pools.pick(rng, s, layer, taken)?;
        taken.push(g.name.clone());
        Some(g.name)
    };
    match shape {
        Shape::A => {
            let a = pick(rng, Shape::A, &mut taken).expect("layer 1 has A models");
            match rng.below(3) {
                0 => (
                    format!(
                        "\nSELECT event_id, event_at, customer_id, product_id, region, {} AS amount\n\
                         FROM §0\nWHERE event_id % {m} <> {r}\n",
                        round2(&format!("amount * {f}"))
                    ),
                    vec![a],
                ),
                1 => (
                    format!(
                        "\nSELECT a.event_id, a.event_at, a.customer_id, a.product_id, p.category AS region, a.amount + p.price AS amount\n\
                         FROM §0 AS a\nJOIN §1 AS p ON p.product_id = a.product_id\nWHERE p.price > {}\n",
                        rng.range(1, 40)
                    ),
                    vec![a, PRODUCTS_M.into()],
                ),
                _ => match pick(rng, Shape::B, &mut taken) {
                    Some(b) => (
                        "\nSELECT a.event_id, a.event_at, a.customer_id, a.product_id, a.region, a.amount\nFROM §0 AS a\n\
                         WHERE a.region IN (SELECT k FROM §1 WHERE n > 0)\n   OR a.customer_id % 3 = 0\n"
                            .to_string(),
                        vec![a, b],
                    ),
                    None => (format!("\nSELECT * FROM §0 WHERE amount > {}\n", rng.range(1, 50)), vec![a]),
                },
            }
        }
        Shape::B => match rng.below(4) {
            0 => {
                let a = pick(rng, Shape::A, &mut taken).expect("A");
                if rng.unit() < 0.5 {
                    ("\nSELECT region AS k, count(*) AS n, sum(amount) AS total\nFROM §0\nGROUP BY region\n".to_string(), vec![a])
                } else {
                    (
                        format!(
                            "\nSELECT CAST(customer_id % {} AS VARCHAR) AS k, count(*) AS n, {} AS total\nFROM §0\nGROUP BY 1\n",
                            rng.range(10, 200),
                            round2("sum(amount)")
                        ),
                        vec![a],
                    )
                }
            }
            1 => {
                let x = pick(rng, Shape::B, &mut taken).expect("B");
                match pick(rng, Shape::B, &mut taken) {
                    Some(y) => (
                        "\nSELECT coalesce(x.k, y.k) AS k, coalesce(x.n, 0) + coalesce(y.n, 0) AS n,\n       coalesce(x.total, 0) - coalesce(y.total, 0) AS total\n\
                         FROM §0 AS x\nFULL OUTER JOIN §1 AS y ON x.k = y.k\n"
                            .to_string(),
                        vec![x, y],
                    ),
                    None => (format!("\nSELECT k, n, total * {f} AS total FROM §0 WHERE n > 1\n"), vec![x]),
                }
            }
            2 => {
                let bs: Vec<String> = (0..3).filter_map(|_| pick(rng, Shape::B, &mut taken)).collect();
                let union = (0..bs.len()).map(|i| format!("SELECT k, n, total FROM §{i}")).collect::<Vec<_>>().join("\n  UNION ALL ");
                (format!("\nSELECT k, CAST(sum(n) AS BIGINT) AS n, sum(total) AS total\nFROM (\n  {union}\n) AS u\nGROUP BY k\n"), bs)
            }
            _ => {
                let d = pick(rng, Shape::D, &mut taken).expect("D");
                ("\nSELECT k, CAST(sum(n) AS BIGINT) AS n, max(total) AS total\nFROM §0\nGROUP BY k\n".to_string(), vec![d])
            }
        },
        Shape::D => {
            let from_a = rng.unit() < 0.4;
            if from_a {
                let a = pick(rng, Shape::A, &mut taken).expect("A");
                let w = if incremental { format!("WHERE {}\n", tfilter("event_at")) } else { String::new() };
                return (
                    format!(
                        "\nSELECT date_trunc('day', event_at) AS day, region AS k, count(*) AS n, sum(amount) AS total\nFROM §0\n{w}{}\n",
                        group_all("1, 2")
                    ),
                    vec![a],
                );
            }
            let d = pick(rng, Shape::D, &mut taken).expect("D");
            let w = if incremental { format!(" AND {}", tfilter("d.day")) } else { String::new() };
            match rng.below(3) {
                0 => (format!("\nSELECT d.day, d.k, d.n, d.total * {f} AS total\nFROM §0 AS d\nWHERE d.n > {r}{w}\n"), vec![d]),
                1 => match pick(rng, Shape::B, &mut taken) {
                    Some(b) => (
                        format!(
                            "\nSELECT d.day, d.k, d.n, d.total / nullif(b.total, 0) AS total\nFROM §0 AS d\n\
                             LEFT JOIN §1 AS b ON b.k = d.k\nWHERE TRUE{w}\n"
                        ),
                        vec![d, b],
                    ),
                    None => (format!("\nSELECT d.day, d.k, d.n, d.total FROM §0 AS d WHERE TRUE{w}\n"), vec![d]),
                },
                _ => match pick(rng, Shape::D, &mut taken) {
                    Some(y) => {
                        let b = pick(rng, Shape::B, &mut taken);
                        let (bj, bt) = match &b {
                            Some(_) => ("\nLEFT JOIN §2 AS b ON b.k = x.k", "x.total / nullif(b.total, 0)"),
                            None => ("", "x.total"),
                        };
                        let w = w.replace("d.day", "x.day");
                        let mut parents = vec![d, y];
                        parents.extend(b);
                        (
                            format!(
                                "\nSELECT x.day, x.k, x.n + coalesce(y.n, 0) AS n, {bt} AS total\nFROM §0 AS x\n\
                                 LEFT JOIN §1 AS y ON y.day = x.day AND y.k = x.k{bj}\nWHERE TRUE{w}\n"
                            ),
                            parents,
                        )
                    }
                    None => (format!("\nSELECT d.day, d.k, d.n, d.total FROM §0 AS d WHERE TRUE{w}\n"), vec![d]),
                },
            }
        }
    }
}

/// Writes the three source files with DuckDB (deterministic arithmetic, no randomness): for
/// Postgres, every one as CSV with a header (the files of [`PG_SOURCES`]), the same rows.
fn write_data(dir: &Path, events: i64, sql: Sql) -> anyhow::Result<()> {
    let data = dir.join("data");
    let q = |p: &str| data.join(p).to_string_lossy().replace('\'', "''");
    let conn = duckdb::Connection::open_in_memory()?;
    let secs = DAYS * 86_400;
    let pg = sql == Sql::Postgres;
    conn.execute_batch(&format!(
        "COPY (
           SELECT i AS event_id,
                  TIMESTAMP '{START}' + to_seconds((i * 18143) % {secs}) AS event_at,
                  CAST((i * 7919 + 13) % {CUSTOMERS} AS INTEGER) AS customer_id,
                  CAST((i * 104729 + 7) % {PRODUCTS} AS INTEGER) AS product_id,
                  ((i * 2654435761) % 100000) / 100.0 AS amount
           FROM range({events}) AS t(i) ORDER BY event_at
         ) TO '{ev}' ({parquet});
         COPY (
           SELECT CAST(i AS INTEGER) AS customer_id,
                  'r' || lpad(CAST((i * 31) % {REGIONS} AS VARCHAR), 2, '0') AS region,
                  ['retail', 'smb', 'enterprise', 'public'][1 + (i * 17) % 4] AS segment
           FROM range({CUSTOMERS}) AS t(i)
         ) TO '{cu}' (FORMAT csv, HEADER true);
         COPY (
           SELECT CAST(i AS INTEGER) AS product_id,
                  'cat' || lpad(CAST((i * 7) % {CATEGORIES} AS VARCHAR), 2, '0') AS category,
                  round(1 + ((i * 7907) % 9900) / 100.0, 2) AS price
           FROM range({PRODUCTS}) AS t(i)
         ) TO '{pr}' ({parquet});",
        ev = q(if pg { "events.csv" } else { "events.parquet" }),
        cu = q("customers.csv"),
        pr = q(if pg { "products.csv" } else { "products.parquet" }),
        parquet = if pg { "FORMAT csv, HEADER true" } else { "FORMAT parquet" },
    ))?;
    Ok(())
}
