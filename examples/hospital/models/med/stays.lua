-- med.stays: movements turned into stays with lead() over each case's moves.
return define_model {
  name        = "med.stays",
  kind        = kind.full(),
  description = "One row per case and department stay: entered_at is the admission or transfer into "
             .. "the department, left_at the case's next movement (transfer or discharge), "
             .. "duration_minutes the whole minutes in between. left_at, left_by and "
             .. "duration_minutes are NULL for stays still open at the end of the data.",
  grain       = { "case_id", "stay_no" },
  schema = {
    { "case_id", "varchar" }, { "patient_id", "varchar" }, { "stay_no", "bigint" },
    { "dept", "varchar" }, { "dept_name", "varchar" },
    { "entered_at", "timestamptz" }, { "left_at", "timestamptz" },
    { "left_by", "varchar" }, { "duration_minutes", "bigint" },
  },
  query = ([[
WITH ordered AS (
    SELECT case_id, patient_id, dept, dept_name, event, moved_at,
           lead(moved_at) OVER w AS next_at,
           lead(event)    OVER w AS next_event
    FROM   %s
    WINDOW w AS (PARTITION BY case_id ORDER BY moved_at, move_id)
)
SELECT case_id,
       patient_id,
       row_number() OVER (PARTITION BY case_id ORDER BY moved_at) AS stay_no,
       dept,
       dept_name,
       moved_at                                        AS entered_at,
       next_at                                         AS left_at,
       next_event                                      AS left_by,
       (epoch_ms(next_at) - epoch_ms(moved_at)) // 60000 AS duration_minutes
FROM   ordered
WHERE  event IN ('admission', 'transfer')
]]):format(ref("med.moves")),
}
