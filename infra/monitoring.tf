# What the service does, in Cloud Monitoring: log-based metrics read from the request
# log, a dashboard and alert policies. Off with monitoring_enabled = false.
#
# The request log is one JSON line per answer on stdout, which Cloud Run turns into a
# log entry: severity becomes the entry's severity and every other field lands in
# jsonPayload. A decided review has message, uid, namespace, pod, decision, reason,
# slices, source, backend, containersChanged, warnings, dryRun and latencyMs. Any other
# answer has message, uid (when known), decision, reason and its HTTP status: decision
# "failed-open" (an ERROR line: the Pod was admitted unchanged), "refused" (a WARNING
# line: 4xx) or "error" (an ERROR line: CastSlice failed around a review). The metrics
# read these fields, never the message's text.

locals {
  # Only this service's entries: a project may run other Cloud Run services.
  service_log = "resource.type=\"cloud_run_revision\" AND resource.labels.service_name=\"${var.service_name}\""
  # Every decided review, and only those, carries a decision and its latency.
  review_log = "${local.service_log} AND jsonPayload.decision:* AND jsonPayload.latencyMs:*"

  label_descriptions = {
    decision = "mutated, unchanged or skipped"
    reason   = "why a Pod was skipped or left unchanged (e.g. not opted in), or why a request got no decision (e.g. unreadable object, body too large)"
    source   = "where the slice count came from: slice-ratio, workload-type, default or policy:<rule>"
    backend  = "resource, nvidia or gke"
    status   = "HTTP status of the refusal"
  }

  log_metrics = {
    reviews = {
      display_name    = "CastSlice reviews"
      description     = "Pod reviews answered, by decision, reason, slice source and backend."
      filter          = local.review_log
      value_type      = "INT64"
      unit            = "1"
      value_extractor = null
      labels = {
        decision = "EXTRACT(jsonPayload.decision)"
        reason   = "EXTRACT(jsonPayload.reason)"
        source   = "EXTRACT(jsonPayload.source)"
        backend  = "EXTRACT(jsonPayload.backend)"
      }
    }
    review_latency = {
      display_name    = "CastSlice review latency"
      description     = "Time CastSlice took to decide on a review, in milliseconds."
      filter          = local.review_log
      value_type      = "DISTRIBUTION"
      unit            = "ms"
      value_extractor = "EXTRACT(jsonPayload.latencyMs)"
      labels = {
        decision = "EXTRACT(jsonPayload.decision)"
        backend  = "EXTRACT(jsonPayload.backend)"
      }
    }
    review_warnings = {
      display_name    = "CastSlice reviews with warnings"
      description     = "Reviews answered with warnings, which kubectl shows to whoever created the Pod (invalid annotations, a hand-placed Pod, fewer GPUs than asked)."
      filter          = "${local.review_log} AND jsonPayload.warnings>0"
      value_type      = "INT64"
      unit            = "1"
      value_extractor = null
      labels = {
        decision = "EXTRACT(jsonPayload.decision)"
        backend  = "EXTRACT(jsonPayload.backend)"
      }
    }
    failed_open_reviews = {
      display_name    = "CastSlice failed-open reviews"
      description     = "Reviews that failed inside CastSlice: the Pod was admitted unchanged, with a warning."
      filter          = "${local.service_log} AND jsonPayload.decision=\"failed-open\""
      value_type      = "INT64"
      unit            = "1"
      value_extractor = null
      labels = {
        reason = "EXTRACT(jsonPayload.reason)"
      }
    }
    errors = {
      display_name    = "CastSlice errors"
      description     = "Every ERROR line of the service: failed-open reviews and any other failure."
      filter          = "${local.service_log} AND severity>=ERROR"
      value_type      = "INT64"
      unit            = "1"
      value_extractor = null
      labels          = {}
    }
    rejected_requests = {
      display_name    = "CastSlice refused requests"
      description     = "Requests refused as not a valid AdmissionReview (400, 405, 413, 415) or on another path than the token's (404). The API server admits a Pod whose review was refused without CastSlice."
      filter          = "${local.service_log} AND jsonPayload.decision=\"refused\""
      value_type      = "INT64"
      unit            = "1"
      value_extractor = null
      labels = {
        status = "EXTRACT(jsonPayload.status)"
        reason = "EXTRACT(jsonPayload.reason)"
      }
    }
  }

  # Monitoring's name for each log-based metric, and the filter that selects it.
  metric_types   = { for name, _ in local.log_metrics : name => "logging.googleapis.com/user/${var.service_name}/${name}" }
  metric_filters = { for name, type in local.metric_types : name => "metric.type=\"${type}\" AND resource.type=\"cloud_run_revision\"" }
  server_errors  = "metric.type=\"run.googleapis.com/request_count\" AND resource.type=\"cloud_run_revision\" AND resource.label.\"service_name\"=\"${var.service_name}\" AND metric.label.\"response_code_class\"=\"5xx\""

  # The dashboard's charts: counts are summed per minute, latency is a percentile
  # of the distribution across revisions.
  charts = [
    {
      title = "Reviews per minute by decision"
      x     = 0
      y     = 0
      width = 24
      series = [
        { plot = "STACKED_BAR", legend = null, filter = local.metric_filters.reviews, aligner = "ALIGN_SUM", reducer = "REDUCE_SUM", group_by = ["metric.label.\"decision\""] },
      ]
    },
    {
      title = "Mutated Pods per minute by backend and slice source"
      x     = 24
      y     = 0
      width = 24
      series = [
        { plot = "STACKED_BAR", legend = null, filter = "${local.metric_filters.reviews} AND metric.label.\"decision\"=\"mutated\"", aligner = "ALIGN_SUM", reducer = "REDUCE_SUM", group_by = ["metric.label.\"backend\"", "metric.label.\"source\""] },
      ]
    },
    {
      title = "Review latency (ms)"
      x     = 0
      y     = 16
      width = 24
      series = [
        for percentile in ["50", "95", "99"] :
        { plot = "LINE", legend = "p${percentile}", filter = local.metric_filters.review_latency, aligner = "ALIGN_DELTA", reducer = "REDUCE_PERCENTILE_${percentile}", group_by = [] }
      ]
    },
    {
      title = "Reviews answered with warnings per minute"
      x     = 24
      y     = 16
      width = 24
      series = [
        { plot = "STACKED_BAR", legend = null, filter = local.metric_filters.review_warnings, aligner = "ALIGN_SUM", reducer = "REDUCE_SUM", group_by = ["metric.label.\"decision\""] },
      ]
    },
    {
      # The ways a Pod gets admitted without CastSlice's changes, on one chart.
      title = "Pods admitted without CastSlice: failed-open reviews, errors, refusals, 5xx answers per minute"
      x     = 0
      y     = 32
      width = 48
      series = [
        { plot = "LINE", legend = "failed open, $${metric.labels.reason}", filter = local.metric_filters.failed_open_reviews, aligner = "ALIGN_SUM", reducer = "REDUCE_SUM", group_by = ["metric.label.\"reason\""] },
        { plot = "LINE", legend = "error lines", filter = local.metric_filters.errors, aligner = "ALIGN_SUM", reducer = "REDUCE_SUM", group_by = [] },
        { plot = "LINE", legend = "refused, status $${metric.labels.status}", filter = local.metric_filters.rejected_requests, aligner = "ALIGN_SUM", reducer = "REDUCE_SUM", group_by = ["metric.label.\"status\""] },
        { plot = "LINE", legend = "5xx answers", filter = local.server_errors, aligner = "ALIGN_SUM", reducer = "REDUCE_SUM", group_by = [] },
      ]
    },
  ]

  # Each alert counts over 5 minutes against its entry of var.alert_thresholds.
  alerts = {
    failed_open = {
      summary = "Pods admitted without CastSlice"
      conditions = [
        { display_name = "Error lines (failed-open reviews and other failures)", filter = local.metric_filters.errors },
        # 404s are what unauthenticated callers of the public URL get; a refused review
        # from the API server is any other status.
        { display_name = "Refused requests other than 404", filter = "${local.metric_filters.rejected_requests} AND metric.label.\"status\"!=\"404\"" },
      ]
      documentation = <<-EOT
        Opted-in Pods were admitted without CastSlice's changes (the webhook fails open).
        Look at the service's ERROR and WARNING lines in Cloud Logging:
        `${local.service_log} AND severity>=WARNING`.
        A refused request names what was wrong with it; on the cluster,
        `apiserver_admission_webhook_fail_open_count` counts the reviews that did not get an answer.
        Pods admitted this way keep their whole GPUs until they are recreated.
      EOT
    }
    server_errors = {
      summary = "service answering 5xx"
      conditions = [
        { display_name = "Cloud Run requests answered 5xx", filter = local.server_errors },
      ]
      documentation = <<-EOT
        The Cloud Run service answered requests with a 5xx status (instance limit reached,
        a timeout, a crash). The API server admits those Pods unmutated. Check the service's
        revisions and logs in the Cloud Run console, and max_instances.
      EOT
    }
  }

  # Written as the Monitoring API returns it (zero positions, empty lists and unset
  # legends left out), so that a plan shows no difference once it is created.
  dashboard = {
    displayName = "CastSlice (${var.service_name})"
    mosaicLayout = {
      columns = 48
      tiles = [
        for chart in local.charts : merge(
          chart.x == 0 ? {} : { xPos = chart.x },
          chart.y == 0 ? {} : { yPos = chart.y },
          {
            width  = chart.width
            height = 16
            widget = {
              title = chart.title
              xyChart = {
                chartOptions = { mode = "COLOR" }
                yAxis        = { scale = "LINEAR" }
                dataSets = [
                  for series in chart.series : merge(
                    {
                      plotType           = series.plot
                      targetAxis         = "Y1"
                      minAlignmentPeriod = "60s"
                      timeSeriesQuery = {
                        timeSeriesFilter = {
                          filter = series.filter
                          aggregation = merge(
                            {
                              alignmentPeriod    = "60s"
                              perSeriesAligner   = series.aligner
                              crossSeriesReducer = series.reducer
                            },
                            length(series.group_by) == 0 ? {} : { groupByFields = series.group_by },
                          )
                        }
                      }
                    },
                    series.legend == null ? {} : { legendTemplate = series.legend },
                  )
                ]
              }
            }
          },
        )
      ]
    }
  }
}

resource "google_logging_metric" "castslice" {
  for_each = { for name, metric in local.log_metrics : name => metric if var.monitoring_enabled }

  name        = "${var.service_name}/${each.key}"
  description = each.value.description
  filter      = each.value.filter

  metric_descriptor {
    display_name = each.value.display_name
    metric_kind  = "DELTA"
    value_type   = each.value.value_type
    unit         = each.value.unit

    dynamic "labels" {
      for_each = each.value.labels
      content {
        key         = labels.key
        value_type  = "STRING"
        description = local.label_descriptions[labels.key]
      }
    }
  }

  label_extractors = each.value.labels
  value_extractor  = each.value.value_extractor

  dynamic "bucket_options" {
    for_each = each.value.value_type == "DISTRIBUTION" ? [each.value] : []
    content {
      # From 0.01 ms up, 30% wider each: 54 buckets reach about 14 s, past the 10 s
      # request timeout, with percentiles good to 30%.
      exponential_buckets {
        num_finite_buckets = 54
        growth_factor      = 1.3
        scale              = 0.01
      }
    }
  }

  depends_on = [google_project_service.apis]
}

# A new log-based metric takes minutes to become visible to Cloud Monitoring, and an
# alert policy on a metric it cannot see yet fails with "Cannot find metric(s) that
# match type". If an apply still fails that way, apply again.
resource "time_sleep" "log_metrics_visible" {
  count = var.monitoring_enabled ? 1 : 0

  create_duration = "120s"
  triggers = {
    metrics = join(",", sort([for metric in google_logging_metric.castslice : metric.id]))
  }
}

resource "google_monitoring_dashboard" "castslice" {
  count = var.monitoring_enabled ? 1 : 0

  dashboard_json = jsonencode(local.dashboard)

  depends_on = [time_sleep.log_metrics_visible]
}

resource "google_monitoring_alert_policy" "castslice" {
  for_each = { for name, alert in local.alerts : name => alert if var.monitoring_enabled }

  display_name          = "CastSlice (${var.service_name}): ${each.value.summary}"
  combiner              = "OR"
  notification_channels = var.notification_channels
  user_labels           = var.labels

  dynamic "conditions" {
    for_each = each.value.conditions
    content {
      display_name = conditions.value.display_name
      condition_threshold {
        filter          = conditions.value.filter
        comparison      = "COMPARISON_GT"
        threshold_value = var.alert_thresholds[each.key]
        duration        = "0s"
        aggregations {
          alignment_period     = "300s"
          per_series_aligner   = "ALIGN_SUM"
          cross_series_reducer = "REDUCE_SUM"
        }
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = each.value.documentation
  }

  # The failed-open policy watches log-based metrics, the other a Cloud Run metric.
  depends_on = [time_sleep.log_metrics_visible, google_project_service.apis]
}
