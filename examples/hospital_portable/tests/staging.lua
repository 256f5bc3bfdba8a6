-- Unit tests of stg.moves (Lua): deduplication, code clean-up, department names, lateness.
-- Run with `efmesh test --config examples/hospital_portable/efmesh.toml`.
local src = require("models.sources")

define_test {
  name  = "stg_moves_cleans_the_feed",
  model = "stg.moves",
  description = "A twice-delivered move keeps its first delivery; ' er ' becomes ER and gets its "
             .. "name; an unknown code keeps a NULL name; a row recorded a day late is flagged.",
  inputs = {
    [src.moves.name] = {
      { move_id = 1, case_id = "C1", patient_id = "P1", dept = " er ", event = "Admission",
        moved_at = "2026-01-01 08:00:00", recorded_at = "2026-01-01 08:05:00" },
      -- the same move delivered again later: dropped
      { move_id = 1, case_id = "C1", patient_id = "P1", dept = "ER", event = "admission",
        moved_at = "2026-01-01 08:00:00", recorded_at = "2026-01-03 09:00:00" },
      -- recorded 26 hours after the move: late
      { move_id = 2, case_id = "C1", patient_id = "P1", dept = "icu", event = "transfer",
        moved_at = "2026-01-01 10:00:00", recorded_at = "2026-01-02 12:00:00" },
      { move_id = 3, case_id = "C1", patient_id = "P1", dept = "XRAY", event = "transfer",
        moved_at = "2026-01-01 11:00:00", recorded_at = "2026-01-01 11:01:00" },
    },
    [src.departments.name] = {
      { code = "ER",  name = "Emergency Department", floor = 0, beds = 32 },
      { code = "ICU", name = "Intensive Care Unit",  floor = 2, beds = 120 },
    },
  },
  expect = {
    { move_id = 1, case_id = "C1", patient_id = "P1", dept = "ER", dept_name = "Emergency Department",
      event = "admission", moved_at = "2026-01-01 08:00:00+00", recorded_at = "2026-01-01 08:05:00+00",
      is_late = false },
    { move_id = 2, case_id = "C1", patient_id = "P1", dept = "ICU", dept_name = "Intensive Care Unit",
      event = "transfer", moved_at = "2026-01-01 10:00:00+00", recorded_at = "2026-01-02 12:00:00+00",
      is_late = true },
    -- dept_name is absent, so NULL: XRAY is not a department
    { move_id = 3, case_id = "C1", patient_id = "P1", dept = "XRAY",
      event = "transfer", moved_at = "2026-01-01 11:00:00+00", recorded_at = "2026-01-01 11:01:00+00",
      is_late = false },
  },
}

define_test {
  name  = "med_moves_keeps_only_its_interval",
  model = "med.moves",
  description = "A time-range model computed for one UTC day returns that day's moves only.",
  vars  = { start = "2026-01-02", ["end"] = "2026-01-03" },
  inputs = {
    ["stg.moves"] = {
      { move_id = 10, case_id = "C9", dept = "ER", event = "admission",
        moved_at = "2026-01-01 23:59:59+00", is_late = false },
      { move_id = 11, case_id = "C9", dept = "ICU", event = "transfer",
        moved_at = "2026-01-02 00:00:00+00", is_late = false },
      { move_id = 12, case_id = "C9", dept = "ICU", event = "discharge",
        moved_at = "2026-01-02 23:59:59+00", is_late = true },
      { move_id = 13, case_id = "C8", dept = "ER", event = "admission",
        moved_at = "2026-01-03 00:00:00+00", is_late = false },
    },
  },
  columns = { "move_id", "moved_at", "is_late" },
  expect = {
    { move_id = 11, moved_at = "2026-01-02 00:00:00+00", is_late = false },
    { move_id = 12, moved_at = "2026-01-02 23:59:59+00", is_late = true },
  },
}
