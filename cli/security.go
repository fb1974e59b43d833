package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/goflink/goflink/internal/security"
)

// securityFlags are flinkctl's TLS and token flags, defaulting to the FLINKCTL_* variables.
type securityFlags struct {
	ca, cert, key, tokenFile string
}

func (s *securityFlags) bind(root *cobra.Command) {
	fs := root.PersistentFlags()
	fs.StringVar(&s.ca, "ca", os.Getenv("FLINKCTL_CA"), "PEM CA file to verify the JobManager by; turns TLS on (env FLINKCTL_CA)")
	fs.StringVar(&s.cert, "cert", os.Getenv("FLINKCTL_CERT"), "PEM client certificate, with --key (env FLINKCTL_CERT)")
	fs.StringVar(&s.key, "key", os.Getenv("FLINKCTL_KEY"), "PEM private key of --cert (env FLINKCTL_KEY)")
	fs.StringVar(&s.tokenFile, "token-file", "", "file holding the JobManager's bearer token (else env FLINKCTL_TOKEN, the token itself)")
}

// dialOptions turns the flags into the client's dial options.
func (s *securityFlags) dialOptions() (*security.ClientOptions, error) {
	o := &security.ClientOptions{CA: s.ca, Cert: s.cert, Key: s.key, Token: os.Getenv("FLINKCTL_TOKEN")}
	if s.tokenFile != "" {
		t, err := security.ReadToken(s.tokenFile)
		if err != nil {
			return nil, usageErr("--token-file: %v", err)
		}
		o.Token = t
	}
	return o, nil
}

// certCmd makes the files a secured cluster needs, with Go's crypto/x509.
func certCmd(g *globals) *cobra.Command {
	var dir string
	var hosts []string
	var validFor time.Duration
	var ifMissing bool
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Make a CA, a certificate for the cluster's processes, a client certificate and a token",
		Long: "cert writes into --dir: ca.pem (and ca-key.pem), cluster.pem/cluster-key.pem (every JobManager and TaskManager: " +
			"server and client certificate for --host), client.pem/client-key.pem (flinkctl --cert/--key) and token " +
			"(security.auth.token-file, flinkctl --token-file), and prints the configuration that uses them. " +
			"It refuses to replace files that exist (a cluster's CA replaced by accident locks its processes out); " +
			"with --if-missing a complete set already in --dir is kept and only the configuration printed.",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if validFor <= 0 {
				return usageErr("--valid-for must be positive, got %v", validFor)
			}
			gen, err := generateCerts(dir, hosts, validFor, ifMissing)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, `# every JobManager and TaskManager
security.ssl.internal.enabled: true
security.ssl.internal.cert: %s
security.ssl.internal.key: %s
security.ssl.internal.ca: %s
# the JobManagers
security.auth.token-file: %s
# and, to accept client certificates besides the token:
#   security.ssl.rest.authentication-enabled: true
#   security.ssl.rest.ca: %s
# flinkctl: --ca %s --token-file %s (or --cert %s --key %s)
`, gen.Cluster, gen.ClusterKey, gen.CA, gen.Token, gen.ClientCA, gen.CA, gen.Token, gen.Client, gen.ClientKey)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "certs", "directory to write into (created 0700)")
	cmd.Flags().StringSliceVar(&hosts, "host", []string{"localhost", "127.0.0.1", "::1"}, "host names and IP addresses clients dial the JobManagers by (repeatable or comma-separated)")
	cmd.Flags().DurationVar(&validFor, "valid-for", 365*24*time.Hour, "validity of the certificates")
	cmd.Flags().BoolVar(&ifMissing, "if-missing", false, "keep the files when --dir holds every one of them already (make up runs it on every start)")
	return cmd
}

// generateCerts writes a new set into dir unless any of its files exists: with ifMissing a
// complete set is kept, otherwise, or when the set is partial, it is an error naming a file.
func generateCerts(dir string, hosts []string, validFor time.Duration, ifMissing bool) (security.Generated, error) {
	files := security.GeneratedFiles(dir)
	var exist, missing []string
	for _, p := range files.Paths() {
		switch _, err := os.Lstat(p); {
		case err == nil:
			exist = append(exist, p)
		case errors.Is(err, fs.ErrNotExist):
			missing = append(missing, p)
		default:
			return security.Generated{}, err
		}
	}
	switch {
	case len(exist) == 0:
		return security.Generate(dir, hosts, validFor)
	case ifMissing && len(missing) == 0:
		return files, nil
	case ifMissing:
		return security.Generated{}, fmt.Errorf("%s holds %s but not %s: remove the partial set", dir, filepath.Base(exist[0]), filepath.Base(missing[0]))
	default:
		return security.Generated{}, fmt.Errorf("%s exists: flinkctl cert does not replace certificates (remove them first, or --if-missing to keep a complete set)", exist[0])
	}
}
