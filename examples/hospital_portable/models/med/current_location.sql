-- name:   med.current_location
-- kind:   incremental_by_unique_key(key = patient_id)
-- schema: patient_id varchar, case_id varchar, dept varchar, dept_name varchar, floor integer,
--         since timestamptz, in_house boolean
-- grain:  patient_id
-- refs:   med.moves, raw.departments
-- description: Where each patient is now (or was last): the department of the patient's latest
--   movement, its floor, since when, and whether the patient is still in the house (the latest
--   movement is not a discharge). Upserted by patient_id on every `efmesh run`: patients absent
--   from a later feed keep their last known row.
--
-- Portable SQL: examples/hospital keeps each patient's latest movement with `QUALIFY
-- row_number() … = 1`; Postgres has no QUALIFY, so the row number is computed in a subquery.
SELECT patient_id, case_id, dept, dept_name, floor, since, in_house
FROM (
    SELECT m.patient_id,
           m.case_id,
           m.dept,
           m.dept_name,
           d.floor,
           m.moved_at                AS since,
           m.event <> 'discharge'    AS in_house,
           row_number() OVER (PARTITION BY m.patient_id ORDER BY m.moved_at DESC, m.move_id DESC) AS latest
    FROM   @ref(med.moves) AS m
    LEFT JOIN @ref(raw.departments) AS d ON d.code = m.dept
) AS moves_by_patient
WHERE  latest = 1
