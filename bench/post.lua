-- wrk script: POST one AdmissionReview body file on every request, then print
-- the run's totals as one JSON line for bench/load.py.
-- Usage: wrk ... URL -- BODY_FILE

function init(args)
  local file = assert(io.open(args[1], "rb"))
  wrk.method = "POST"
  wrk.body = file:read("*a")
  wrk.headers["Content-Type"] = "application/json"
  file:close()
end

function done(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}}\n',
    summary.requests, summary.duration,
    errors.connect, errors.read, errors.write, errors.status, errors.timeout))
end
