-- Forward-auth to Ratewarden for HAProxy 2.5 and later, with HAProxy's own HTTP client
-- (`core.httpclient()`): no other Lua library is needed.
--
--   global
--       lua-load /etc/haproxy/ratewarden.lua
--   frontend shop
--       http-request lua.ratewarden http://10.0.0.5:8080/v1/auth x-api-key,x-tenant
--
-- The action asks `/v1/auth` about the request, naming it in the X-Forwarded-* headers
-- (method, path and query, host, the client's address appended to any X-Forwarded-For it
-- came with) and copying the client's own headers listed in the second argument (every
-- value of each: Ratewarden refuses a key sent twice rather than guess which one counts).
-- It decides nothing itself: it leaves Ratewarden's answer in transaction variables, and
-- the config (docs/front-doors.md) refuses or forwards by them, so what happens is
-- visible in haproxy.cfg:
--
--   txn.ratewarden_status       the answer's status (200, 429, 503, ...; 0 if no answer)
--   txn.ratewarden_ratelimit    its RateLimit field         (only when it sent one)
--   txn.ratewarden_policy       its RateLimit-Policy field  (only when it sent one)
--   txn.ratewarden_retry_after  its Retry-After field       (only when it sent one)
--   txn.ratewarden_body         a refusal's problem+json body (Ratewarden's own, or
--                               `{"status":N}` when the answer had none or was not its)

-- How long to wait for Ratewarden, in milliseconds. An answer slower than this is no answer
-- (status 0), which the config refuses: a rate limiter that cannot be asked must not
-- quietly become no limit at all.
local TIMEOUT_MS = 1000

-- The first value of header `name` in a header table, or nil. HAProxy's header tables
-- index each header's values from 0.
local function first(headers, name)
    local values = headers[name]
    if values == nil then
        return nil
    end
    return values[0] or values[1]
end

-- Every value of header `name` in a header table, in order, as the HTTP client takes them.
local function all(headers, name)
    local out = {}
    local values = headers[name]
    if values ~= nil then
        local i = 0
        while values[i] ~= nil do
            out[#out + 1] = values[i]
            i = i + 1
        end
    end
    return out
end

local function ask(txn, url, copied)
    local request = txn.http:req_get_headers()
    local src = txn.sf:src()
    local chain = all(request, "x-forwarded-for")
    chain[#chain + 1] = src
    local headers = {
        ["x-forwarded-method"] = { txn.sf:method() },
        -- `pathq`, not `url`: an HTTP/2 request's `url` is absolute.
        ["x-forwarded-uri"] = { txn.sf:pathq() },
        ["x-forwarded-for"] = { table.concat(chain, ", ") },
    }
    local host = first(request, "host")
    if host ~= nil then
        headers["x-forwarded-host"] = { host }
    end
    for name in string.gmatch(copied or "", "[^,%s]+") do
        name = string.lower(name)
        local values = all(request, name)
        if #values > 0 then
            headers[name] = values
        end
    end

    txn:set_var("txn.ratewarden_status", 0)
    local client = core.httpclient()
    local ok, answer = pcall(client.get, client, { url = url, headers = headers, timeout = TIMEOUT_MS })
    if not ok then
        core.Warning("ratewarden: asking " .. url .. " failed: " .. tostring(answer))
        txn:set_var("txn.ratewarden_body", '{"status":503}')
        return
    end
    if answer == nil or answer.status == nil or answer.status == 0 then
        core.Warning("ratewarden: no answer from " .. url)
        txn:set_var("txn.ratewarden_body", '{"status":503}')
        return
    end
    txn:set_var("txn.ratewarden_status", answer.status)
    local fields = answer.headers or {}
    for header, var in pairs({
        ["ratelimit"] = "txn.ratewarden_ratelimit",
        ["ratelimit-policy"] = "txn.ratewarden_policy",
        ["retry-after"] = "txn.ratewarden_retry_after",
    }) do
        local value = first(fields, header)
        if value ~= nil then
            txn:set_var(var, value)
        end
    end
    if answer.status ~= 200 then
        -- Ratewarden refuses with problem+json; anything else (HAProxy's own 503 page when
        -- it could not connect, a bare 429 of a `sensitive` rule) becomes a plain problem
        -- of the same status, so the body always matches the content type the config sends.
        local body = answer.body
        local kind = first(fields, "content-type") or ""
        if body == nil or body == "" or not string.find(kind, "application/problem+json", 1, true) then
            body = string.format('{"status":%d}', answer.status)
        end
        txn:set_var("txn.ratewarden_body", body)
    end
end

core.register_action("ratewarden", { "http-req" }, ask, 2)
