-- efmesh Lua guards: run once on the interpreter's own library tables before any model file.
--
-- Library functions run inside C, where the instruction hook that enforces the budgets never
-- fires. So every one that can loop is wrapped here and bounded by its WORK, not only by the
-- size of its result: before the call it charges the work meter (`limits.charge`) with what the
-- call may cost (bytes scanned, repetitions, elements moved or sorted), so a call that would run
-- for long is refused before it starts; after the call, what it produced. The meter counts
-- against the same budget as the VM instructions, and every charge also reads the clock, so a
-- loop of library calls ends at the file's wall-clock budget too. Others install finalizers
-- that run with hooks off (refused in the safe base functions). Because the string metatable
-- is locked afterwards, method calls such as ("x"):rep(n) reach these same wrapped functions.
-- `...` is the limits table.
local limits = ...
local charge = limits.charge
local string, table, utf8, type, error, select, tostring, tonumber = string, table, utf8, type, error, select, tostring, tonumber
local floor, log, abs, min = math.floor, math.log, math.abs, math.min
-- Unguarded, for the guards' own scans (linear patterns; the call is charged by its caller).
local raw_find, raw_match = string.find, string.match

-- A value as text without an address: Lua's own `<name>: 0x…` (a table, function, thread or
-- userdata without `__tostring`; `<name>` is the type or a `__name`, which may hold colons) is
-- cut to its name; a `__tostring` (a model handle's) is kept. An address depends on where the
-- allocator put the value, which changes with what the interpreter loaded before: SQL built
-- from it would change with the load order and thread count, and get a new fingerprint with no
-- edit. The safe base's `tostring` is this function (returned below).
local addressed = { table = true, ["function"] = true, thread = true, userdata = true }
local function plain(v)
  local text = tostring(v)
  if addressed[type(v)] then
    return raw_match(text, "^(.*): 0x%x+$") or raw_match(text, "^(.*): %(nil%)$") or text
  end
  return text
end

-- Units: one per byte scanned or copied; PER_ELEMENT per element moved, value produced,
-- comparison or callback made (each costs tens of byte-steps inside C). The budget allows about
-- a second of C work in one call, so a call that would take longer is refused before it starts.
local PER_ELEMENT = 32

-- Length of a string argument (numbers are converted by the library, so they count too).
local function slen(v)
  local t = type(v)
  if t == "string" then return #v end
  if t == "number" then return #tostring(v) end
  return 0
end
-- Total length of the arguments (C converts numeric strings by scanning them).
local function args_len(...)
  local n = 0
  for k = 1, select("#", ...) do
    n = n + slen((select(k, ...)))
  end
  return n
end
-- A count or position argument converted as the C library would convert it: a numeric string
-- becomes its number (`tonumber` reads exactly what `lua_tointegerx` reads, at any length, so
-- `("0"):rep(64) .. "1000000000000000"` is 10^15 here too), its scan charged by its length. The
-- guards charge for the converted value and pass IT on to C, so what C loops over is what was
-- charged. Anything else comes back unchanged (C raises its own error for it).
local function arg(v, label)
  if type(v) == "string" then
    charge(#v, label)
    local n = tonumber(v)
    if n ~= nil then return n end
  end
  return v
end
-- A converted argument (see `arg`) when it is a number, else nil.
local function num(v)
  if type(v) == "number" then return v end
  return nil
end
-- How many positions `i..j` covers in a sequence of `n` (negative positions count from the end).
local function span(n, i, j)
  i, j = num(i) or 1, num(j) or n
  if i < 0 then i = n + i + 1 end
  if j < 0 then j = n + j + 1 end
  if i < 1 then i = 1 end
  if j > n then j = n end
  if j < i then return 0 end
  return j - i + 1
end
-- How many indices `i..j` covers (absolute indices, as `table.concat` and `table.unpack` take).
local function count(i, j)
  i, j = num(i) or 1, num(j) or 0
  if j < i then return 0 end
  return j - i + 1
end
-- Charges the total length of a call's string results, then returns them.
local function produced(...)
  charge(args_len(...))
  return ...
end
-- Like `produced` for the first result only (the others are counts or positions).
local function produced1(r, ...)
  charge(slen(r))
  return r, ...
end
-- The length of a table as the library sees it, or 0.
local function tlen(t)
  if type(t) == "table" then return #t end
  return 0
end

local rep = string.rep
string.rep = function(s, n, sep)
  n = arg(n, "string.rep")
  local k = num(n)
  if k and k >= 1 then
    local size = slen(s) * k + slen(sep) * (k - 1)
    -- `k` iterations even when the result is empty (`(""):rep(1e15)`).
    charge(4 * k + size, "string.rep")
    if size > limits.max_string then
      error(("string.rep would build a %d-byte string (limit %d bytes)"):format(floor(size), limits.max_string), 2)
    end
  end
  return rep(s, n, sep)
end

local move = table.move
table.move = function(a1, f, e, t, a2)
  f, e, t = arg(f, "table.move"), arg(e, "table.move"), arg(t, "table.move")
  local nf, ne = num(f), num(e)
  if nf and ne then
    if ne - nf + 1 > limits.max_table_move then
      error(("table.move of %d elements (limit %d)"):format(floor(ne - nf + 1), limits.max_table_move), 2)
    end
    charge((ne - nf + 1) * PER_ELEMENT, "table.move")
  end
  return move(a1, f, e, t, a2)
end

-- Lua patterns backtrack inside C. Bound the worst case: subject length ^ (quantifiers + 1);
-- and charge each call (subject length × pattern length: a match may be tried at every
-- position), so a long loop of cheap calls on a big string ends with the budget.
local function quantifiers(p)
  local n, i = 0, 1
  while i <= #p do
    local c = p:sub(i, i)
    if c == "%" then
      i = i + 2
    else
      if c == "*" or c == "+" or c == "-" then n = n + 1 end
      i = i + 1
    end
  end
  return n
end
local function guard(name, f)
  local label = "string." .. name
  string[name] = function(s, p, r, ...)
    local ls, lp = slen(s), slen(p)
    if type(s) == "string" and type(p) == "string" then
      local q = quantifiers(p)
      local cost = (#s + 1) ^ (q + 1)
      if cost > limits.max_pattern_cost then
        error(("string.%s: pattern `%s` may backtrack too long on a %d-byte string; simplify it"):format(name, p, #s), 2)
      end
    end
    local cost = (ls + 1) * (lp + 1)
    if name == "gsub" then
      -- The replacement is copied, or called / looked up, at each match.
      local tr = type(r)
      cost = cost + (ls + 1) * ((tr == "function" or tr == "table") and PER_ELEMENT or slen(r))
    end
    charge(cost, label)
    if name == "gsub" then return produced1(f(s, p, r, ...)) end
    return produced(f(s, p, r, ...))
  end
end
for _, name in ipairs({ "find", "match", "gmatch", "gsub" }) do
  guard(name, string[name])
end

-- Functions that scan or copy their string argument.
for _, name in ipairs({ "lower", "upper", "reverse" }) do
  local f, label = string[name], "string." .. name
  string[name] = function(s, ...)
    charge(slen(s), label)
    return f(s, ...)
  end
end
do
  local sub = string.sub
  string.sub = function(s, i, j)
    return produced1(sub(s, i, j))
  end
  local byte = string.byte
  string.byte = function(s, i, j)
    i, j = arg(i, "string.byte"), arg(j, "string.byte")
    charge(span(slen(s), i, j or num(i) or 1) * PER_ELEMENT, "string.byte")
    return byte(s, i, j)
  end
  local char = string.char
  string.char = function(...)
    charge(select("#", ...) * PER_ELEMENT + args_len(...), "string.char")
    return char(...)
  end
  local format, pack, unpack = string.format, table.pack, table.unpack
  string.format = function(fmt, ...)
    local n = slen(fmt) + 512 * select("#", ...)
    for k = 1, select("#", ...) do
      n = n + 4 * slen((select(k, ...)))
    end
    charge(n, "string.format")
    -- No addresses in what a model builds (they change with what the interpreter loaded
    -- before, and the SQL and its fingerprint would follow): `%p` is refused, and `%s` of a
    -- table, function or userdata without `__tostring` gives its type's name.
    if type(fmt) == "string" then
      local i = 1
      while true do
        local _, e, conv = raw_find(fmt, "%%[-+ #0-9.]*(.)", i)
        if e == nil then break end
        if conv == "p" then
          error("string.format: `%p` formats an address, which changes from one load to the next; it is not available in model files", 2)
        end
        i = e + 1
      end
    end
    local args = pack(...)
    for k = 1, args.n do
      if addressed[type(args[k])] then args[k] = plain(args[k]) end
    end
    return produced1(format(fmt, unpack(args, 1, args.n)))
  end
end

do
  local concat = table.concat
  table.concat = function(t, sep, i, j)
    i, j = arg(i, "table.concat"), arg(j, "table.concat")
    charge(count(i, j or tlen(t)) * (PER_ELEMENT + slen(sep)), "table.concat")
    return produced1(concat(t, sep, i, j))
  end
  local insert = table.insert
  table.insert = function(t, ...)
    if select("#", ...) >= 2 then
      local pos, v = ...
      pos = arg(pos, "table.insert")
      local p = num(pos)
      if p then charge((tlen(t) - p + 1) * PER_ELEMENT, "table.insert") end
      return insert(t, pos, v, select(3, ...))
    end
    return insert(t, ...)
  end
  local remove = table.remove
  table.remove = function(t, pos)
    pos = arg(pos, "table.remove")
    local p = num(pos)
    if p then charge((tlen(t) - p + 1) * PER_ELEMENT, "table.remove") end
    return remove(t, pos)
  end
  local sort = table.sort
  table.sort = function(t, cmp)
    local n = tlen(t)
    -- n log n comparisons, each a call when `cmp` is given.
    if n > 1 then charge(n * (log(n, 2) + 1) * (cmp ~= nil and PER_ELEMENT or 4), "table.sort") end
    return sort(t, cmp)
  end
  local unpack = table.unpack
  table.unpack = function(t, i, j)
    i, j = arg(i, "table.unpack"), arg(j, "table.unpack")
    charge(count(i, j or tlen(t)) * PER_ELEMENT, "table.unpack")
    return unpack(t, i, j)
  end
  local pack = table.pack
  table.pack = function(...)
    charge(select("#", ...) * PER_ELEMENT, "table.pack")
    return pack(...)
  end
end

do
  local char, codes, codepoint, len, offset = utf8.char, utf8.codes, utf8.codepoint, utf8.len, utf8.offset
  utf8.char = function(...)
    charge(select("#", ...) * PER_ELEMENT + args_len(...), "utf8.char")
    return char(...)
  end
  utf8.codes = function(s, ...)
    charge(slen(s), "utf8.codes")
    return codes(s, ...)
  end
  utf8.codepoint = function(s, i, j, ...)
    i, j = arg(i, "utf8.codepoint"), arg(j, "utf8.codepoint")
    charge(span(slen(s), i, j or num(i) or 1) * PER_ELEMENT, "utf8.codepoint")
    return codepoint(s, i, j, ...)
  end
  utf8.len = function(s, i, j, ...)
    i, j = arg(i, "utf8.len"), arg(j, "utf8.len")
    charge(span(slen(s), i, j), "utf8.len")
    return len(s, i, j, ...)
  end
  utf8.offset = function(s, n, i, ...)
    n, i = arg(n, "utf8.offset"), arg(i, "utf8.offset")
    local k = num(n)
    charge(min(k and abs(k) or 0, slen(s)) + 1, "utf8.offset")
    return offset(s, n, i, ...)
  end
end

-- Base functions that scan their string arguments.
do
  local raw_tonumber, raw_rawequal = tonumber, rawequal
  _ENV.tonumber = function(v, ...)
    charge(slen(v))
    return raw_tonumber(v, ...)
  end
  _ENV.rawequal = function(a, b)
    if type(a) == "string" and type(b) == "string" and #a == #b then charge(#a) end
    return raw_rawequal(a, b)
  end
end

-- Binary packing is not needed to write SQL, and its formats can ask C for unbounded padding;
-- bytecode cannot be loaded anyway.
string.pack, string.unpack, string.packsize, string.dump = nil, nil, nil, nil

return plain
