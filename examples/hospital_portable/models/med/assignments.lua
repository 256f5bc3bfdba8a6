-- med.assignments: the history of each in-house patient's department and attending physician,
-- as a slowly changing dimension of type 2. efmesh adds `valid_from` / `valid_to` (UTC): every
-- `efmesh run` closes the open row of a patient who moved or changed attending and opens a new
-- one; a discharged patient (absent from the source) has the open row closed.
-- Portable SQL: examples/hospital picks the physician from a list literal
-- (`['Adams', …][1 + n % 4]`), which Postgres does not have; a CASE does the same.

return define_model {
  name        = "med.assignments",
  kind        = kind.scd_type2 { key = "patient_id", columns = { "dept", "attending" } },
  description = "Department and attending physician of every patient in the house, with history "
             .. "(valid_from / valid_to). The attending is derived from the case number: one of four "
             .. "physicians per department. floor follows dept and is not watched on its own.",
  grain       = { "patient_id" },
  schema = {
    { "patient_id", "varchar" }, { "dept", "varchar" }, { "floor", "integer" }, { "attending", "varchar" },
  },
  query = ([[
SELECT patient_id,
       dept,
       floor,
       'Dr. ' || CASE CAST(substr(case_id, 2) AS INTEGER) %% 4
                     WHEN 0 THEN 'Adams' WHEN 1 THEN 'Baker' WHEN 2 THEN 'Chen' WHEN 3 THEN 'Diaz'
                 END
              || ' (' || dept || ')' AS attending
FROM   %s
WHERE  in_house
]]):format(ref("med.current_location")),
}
