// Package monitoring holds the tests of monitoring/: the alert rules pass
// the checks `promtool check rules` runs (rulefmt: YAML, PromQL,
// templates), fire on the series they are meant for and not on others, and
// every query of the rules and the Grafana dashboard names only metrics the
// controller exports (controller.MetricNames, read by running
// internal/metricnames in Steward's own module).
package monitoring
