// Package config holds goflink's configuration: Flink's key names, their types, defaults and
// scopes, Flink's duration syntax ("500ms", "10 s", "1 min"), loading of Flink-style YAML
// files, and the precedence rule: flag > job spec config > cluster config file > default.
//
// Unknown keys are errors, with a "did you mean" when a known key is close. Values are
// validated when they are set, so a Config only ever holds valid values.
package config
