-- stg.moves: the raw feed cleaned up and deduplicated once, into a table upserted by move_id.
-- Not a view: deduplicating takes a window over the whole feed, which no time filter can pass,
-- so every weekly batch of med.moves would redo it. As a table, the feed is deduplicated once
-- per apply or run, and med.moves's batches read only their days.
-- Portable SQL: examples/hospital keeps the first delivery with `QUALIFY row_number() … = 1`;
-- Postgres has no QUALIFY, so the row number is computed in a subquery and filtered outside it.
local src = require("models.sources")

return define_model {
  name        = "stg.moves",
  kind        = kind.incremental_by_unique_key { key = "move_id" },
  description = "One row per movement: duplicate deliveries dropped (the first recorded wins), "
             .. "department codes upper-cased and named, timestamps typed as UTC instants, and "
             .. "is_late set when the row was recorded a day or more after the move.",
  grain       = { "move_id" },
  schema = {
    { "move_id", "bigint" }, { "case_id", "varchar" }, { "patient_id", "varchar" },
    { "dept", "varchar" }, { "dept_name", "varchar" }, { "event", "varchar" },
    { "moved_at", "timestamptz" }, { "recorded_at", "timestamptz" }, { "is_late", "boolean" },
  },
  query = ([[
SELECT move_id, case_id, patient_id, dept, dept_name, event, moved_at, recorded_at, is_late
FROM (
    SELECT m.move_id,
           m.case_id,
           m.patient_id,
           upper(trim(m.dept))                              AS dept,
           d.name                                           AS dept_name,
           lower(trim(m.event))                             AS event,
           timezone('UTC', m.moved_at)                      AS moved_at,
           timezone('UTC', m.recorded_at)                   AS recorded_at,
           m.recorded_at - m.moved_at >= INTERVAL '1 day'   AS is_late,
           row_number() OVER (PARTITION BY m.move_id ORDER BY m.recorded_at) AS delivery
    FROM   %s AS m
    LEFT JOIN %s AS d ON d.code = upper(trim(m.dept))
) AS deliveries
WHERE  delivery = 1
]]):format(ref(src.moves), ref(src.departments)),
}
