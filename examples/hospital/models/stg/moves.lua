-- stg.moves: the raw feed cleaned up, as a view (no copy of the data).
local src = require("models.sources")

return define_model {
  name        = "stg.moves",
  kind        = kind.view(),
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
SELECT m.move_id,
       m.case_id,
       m.patient_id,
       upper(trim(m.dept))                              AS dept,
       d.name                                           AS dept_name,
       lower(trim(m.event))                             AS event,
       timezone('UTC', m.moved_at)                      AS moved_at,
       timezone('UTC', m.recorded_at)                   AS recorded_at,
       m.recorded_at - m.moved_at >= INTERVAL 1 DAY     AS is_late
FROM   %s AS m
LEFT JOIN %s AS d ON d.code = upper(trim(m.dept))
QUALIFY row_number() OVER (PARTITION BY m.move_id ORDER BY m.recorded_at) = 1
]]):format(ref(src.moves), ref(src.departments)),
}
