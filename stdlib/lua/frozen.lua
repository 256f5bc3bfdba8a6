-- efmesh: macros keep no state between calls (SPEC §4 invariants 34 and 54).
--
-- The macro interpreter evaluates the macro files once per load and then answers calls from
-- every loader thread, in whatever order they come. A macro that leaves something behind — a
-- table field (`shared.v = x`), a file-level variable (`n = n + 1`), a module's field, a
-- metatable — would make a model's SQL depend on which models that interpreter served before it:
-- on the load cache and on thread timing. So before a macro's first call the host takes a
-- snapshot of everything the macro can reach, and after each of its calls compares, whether the
-- call returned or raised: a difference is a load error naming the macro and the first thing
-- written, and the interpreter answers no later request of the load (the state it would answer
-- from is no longer what the files define). The audit bodies and signals the interpreter runs
-- are checked the same way (they reach the same state).
--
-- What a macro can reach: its function's upvalues (the file's `local`s and its globals, through
-- `_ENV`), followed through tables (keys, values, metatables) and the project's functions (their
-- upvalues), and the modules kept from the definition files (`require` hands them out). The
-- functions every file's environment holds (`know`: the sandbox's base functions, the libraries
-- and their guards, the host's API, the `kind` constructors) are not followed: their internals
-- are out of any script's reach, and what state they keep is dropped before each call (the
-- sorted keys `next` walks, the modules `require` evaluated for the call). Any other function that is not the project's — one a
-- library call made, such as the iterator `string.gmatch` or `pairs` returns — keeps state no
-- snapshot can read (how far it got): reaching one is refused before the call, naming it, and so
-- is a coroutine (the sandbox has no `coroutine` library; refused all the same). A snapshot is a
-- shallow copy of each table reached and the upvalues of each function reached; the comparison
-- reads every one of them again (no allocation, no metamethod, no project code runs), so a call
-- costs time in proportion to what its macro reaches (a file's globals and library copies: some
-- hundred entries).
--
-- Loaded by the macro interpreter only (`script::lua::frozen`), with the debug library's
-- `getupvalue`, `getinfo` and `getmetatable`, which no script ever sees.
local getupvalue, getinfo, getmetatable = ...
local next, type, rawequal, rawget, tostring, select = next, type, rawequal, rawget, tostring, select
local ipairs, utf8 = ipairs, utf8
local mtype = math.type
local find, format, sub = string.find, string.format, string.sub

-- A function of a project file (chunks are named `@<file>`), not C and not efmesh's own.
local function project_function(f)
  local info = getinfo(f, "S")
  return info.what ~= "C" and sub(info.source, 1, 1) == "@"
end

-- The functions of every file's environment (`know`), which a snapshot does not follow.
local known = {}

-- Marks as known every function `...` hold (followed through tables and their metatables), and
-- the iterators `ipairs` and `utf8.codes` hand out: they keep no state (the loop passes it back
-- at each step).
local function know(...)
  local seen = {}
  local function mark(v)
    local tv = type(v)
    if tv == "function" then
      known[v] = true
    elseif tv == "table" and not seen[v] then
      seen[v] = true
      for _, x in next, v do
        mark(x)
      end
      mark(getmetatable(v))
    end
  end
  for i = 1, select("#", ...) do
    mark((select(i, ...)))
  end
  mark((ipairs({})))
  if utf8 then
    mark((utf8.codes("")))
    mark((utf8.codes("", true)))
  end
end

-- The path of entry `k` of the table reached by `path` (`""`: a file's globals), as Lua code
-- would write it: `shared.v`, `list[3]`, `names["a b"]`.
local function field(path, k)
  local tk = type(k)
  if tk == "string" and find(k, "^[%a_][%w_]*$") then
    if path == "" then return k end
    return path .. "." .. k
  end
  local key
  if tk == "string" then
    key = format("%q", k)
  elseif tk == "number" or tk == "boolean" then
    key = tostring(k)
  else
    key = "<" .. tk .. ">"
  end
  return (path == "" and "_ENV" or path) .. "[" .. key .. "]"
end

-- The path of the metatable of the table reached by `path`.
local function metatable_of(path)
  return "getmetatable(" .. (path == "" and "_ENV" or path) .. ")"
end

-- Whether number `now` differs from number `was` equal to it (`rawequal` and `==` hold): the
-- other subtype (`1` and `1.0`, which `tostring` and `%s` write differently) or the other zero
-- (`0.0` and `-0.0`: `1/x` tells them apart).
local function other_number(was, now)
  return mtype(was) ~= mtype(now) or (was == 0 and 1 / was ~= 1 / now)
end

-- Whether `now` differs from `was`: not the same value (NaN is itself), or the same number
-- written otherwise (`other_number`).
local function differs(was, now)
  if rawequal(was, now) then
    return type(now) == "number" and other_number(was, now)
  end
  return was == was or now == now
end

-- How each value of a snapshot was reached, to name what changed: the `i`-th value reached is
-- root `key[i]` (a label: `""` for a file's globals, an upvalue's name, `require("m")`) when
-- `parent[i]` is false, else entry `key[i]` of the `parent[i]`-th (its metatable when `meta[i]`).
-- Paths are only built for a report (one per value would cost the square of a chain's length).
local function path_of(snap, i)
  local parent, key, meta = snap.parent, snap.key, snap.meta
  local steps, depth = {}, 0
  while parent[i] and depth < 16 do
    depth = depth + 1
    steps[depth] = i
    i = parent[i]
  end
  local path = parent[i] and "…" or key[i]
  for d = depth, 1, -1 do
    local j = steps[d]
    if meta[j] then
      path = metatable_of(path)
    else
      path = field(path, key[j])
    end
  end
  return path
end

-- The snapshot of what `f` and `roots` (a sequence: value, label, value, label…) reach; or `nil`
-- and the path of the first function reached whose state no snapshot can read (neither known nor
-- the project's: an iterator a library call made) or of a coroutine.
local function snapshot(f, roots)
  local seen = {}
  local tables, functions = {}, {}
  local queue, parent, key, meta, tail = {}, {}, {}, {}, 0
  local function reach(v, from, k, is_meta)
    local tv = type(v)
    if (tv == "table" or tv == "function" or tv == "thread") and not seen[v] then
      seen[v] = true
      tail = tail + 1
      queue[tail], parent[tail], key[tail], meta[tail] = v, from, k, is_meta
    end
  end
  reach(f, false, "", false)
  for i = 1, #roots, 2 do
    reach(roots[i], false, roots[i + 1], false)
  end
  -- Breadth first, without recursion: a long chain of tables is no deep Lua stack.
  local head = 1
  while head <= tail do
    local v = queue[head]
    if type(v) == "table" then
      -- `objects`: the keys whose value is a table or a userdata, compared with `rawequal`
      -- (`~=` on two of them may call an `__eq`: project code).
      local copy, n, objects = {}, 0, nil
      for k, x in next, v do
        n = n + 1
        copy[k] = x
        local tx = type(x)
        if tx == "table" or tx == "userdata" then
          objects = objects or {}
          objects[k] = true
        end
        reach(k, head, k, false)
        reach(x, head, k, false)
      end
      local mt = getmetatable(v)
      reach(mt, head, false, true)
      tables[#tables + 1] = { v, copy, n, mt, head, objects or {} }
    elseif known[v] then
      -- Not followed (see the top of this file).
    elseif type(v) == "function" and project_function(v) then
      local ups, i = {}, 1
      while true do
        local name, x = getupvalue(v, i)
        if name == nil then break end
        ups[i] = x
        -- `_ENV` is the file's globals: their fields are named as the file writes them.
        reach(x, false, name == "_ENV" and "" or name, false)
        i = i + 1
      end
      if i > 1 then
        functions[#functions + 1] = { v, ups, i - 1 }
      end
    else
      return nil, path_of({ parent = parent, key = key, meta = meta }, head)
    end
    head = head + 1
  end
  return { tables = tables, functions = functions, parent = parent, key = key, meta = meta }
end

-- The path of the first thing that differs from `snap` (`nil` when nothing does).
local function changed(snap)
  local tables, functions = snap.tables, snap.functions
  for i = 1, #tables do
    local r = tables[i]
    local t, copy, objects = r[1], r[2], r[6]
    local n = 0
    for k, x in next, t do
      n = n + 1
      local was = copy[k]
      -- `~=` first (no call): neither side is a table or a userdata unless `objects[k]`.
      if objects[k] then
        if not rawequal(was, x) then return field(path_of(snap, r[5]), k) end
      elseif was ~= x then
        if was == was or x == x then return field(path_of(snap, r[5]), k) end
      elseif type(x) == "number" and other_number(was, x) then
        return field(path_of(snap, r[5]), k)
      end
    end
    if n ~= r[3] then
      -- An entry was removed.
      for k in next, copy do
        if rawget(t, k) == nil then return field(path_of(snap, r[5]), k) end
      end
      return path_of(snap, r[5])
    end
    if not rawequal(getmetatable(t), r[4]) then
      return metatable_of(path_of(snap, r[5]))
    end
  end
  for i = 1, #functions do
    local r = functions[i]
    local f, ups = r[1], r[2]
    for j = 1, r[3] do
      local name, x = getupvalue(f, j)
      if differs(ups[j], x) then return name end
    end
  end
  return nil
end

return snapshot, changed, know
