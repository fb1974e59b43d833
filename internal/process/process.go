// Package process holds what the jobmanager and taskmanager commands share: the --config,
// -D and --log-level flags, and how they become a Config and a logger.
package process

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/goflink/goflink/config"
)

// Flags are the common flags of a goflink process.
type Flags struct {
	ConfigFile string
	Dynamic    []string
	LogLevel   string
	LogFormat  string
}

// Bind registers the flags.
func (f *Flags) Bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.ConfigFile, "config", "", "Flink-style YAML config file")
	fs.StringArrayVarP(&f.Dynamic, "define", "D", nil, "config key=value (overrides --config); repeatable")
	fs.StringVar(&f.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.LogFormat, "log-format", "text", "log format: text or json")
}

// Settings loads the config file, then applies -D (flag > file > default).
func (f *Flags) Settings() (*config.Config, error) {
	c := config.New()
	if f.ConfigFile != "" {
		fc, err := config.LoadFile(f.ConfigFile)
		if err != nil {
			return nil, err
		}
		c.Merge(fc)
	}
	dc, err := config.ParseDynamic(f.Dynamic)
	if err != nil {
		return nil, err
	}
	c.Merge(dc)
	return c, nil
}

// Logger builds the process logger on stderr.
func (f *Flags) Logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.LogLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.LogLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(f.LogFormat) {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", f.LogFormat)
}
