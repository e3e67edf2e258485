-- wrk script: POST /v1/orders for one SKU of SKUS (env), quantity 1.
-- SKUS=1 is one hot SKU; SKUS=100 spreads orders uniformly over S-0..S-99.
local n = tonumber(os.getenv("SKUS") or "1")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

request = function()
  local sku = "S-" .. math.random(0, n - 1)
  return wrk.format(nil, "/v1/orders", nil, '{"items":[{"sku":"' .. sku .. '","quantity":1}]}')
end

local statuses = {}
response = function(status)
  statuses[status] = (statuses[status] or 0) + 1
end

done = function(summary, latency, requests)
  io.write(string.format("RESULT skus=%d requests=%d rps=%.0f p50_ms=%.2f p99_ms=%.2f errors=%d\n",
    n, summary.requests, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
