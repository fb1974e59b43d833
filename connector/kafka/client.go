package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/goflink/goflink/connector/kafka/kafkaspec"
	"github.com/goflink/goflink/internal/confine"
)

// clientOpts are the seed brokers and the client options of a role's properties (checked by
// kafkaspec.ParseProperties at submit), reading the TLS files; the first problem is the error.
func clientOpts(role string, brokers []string, props map[string]string, sink bool) ([]kgo.Opt, kafkaspec.Client, error) {
	c, problems := kafkaspec.ParseProperties(props, sink)
	if len(problems) > 0 {
		return nil, c, fmt.Errorf("kafka %s: %w", role, problems[0])
	}
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	if c.ID != "" {
		opts = append(opts, kgo.ClientID(c.ID))
	}
	if c.FetchMaxWait > 0 {
		opts = append(opts, kgo.FetchMaxWait(c.FetchMaxWait))
	}
	if c.Linger != nil {
		opts = append(opts, kgo.ProducerLinger(*c.Linger))
	}
	if c.Compression != "" {
		codec := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
			"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}[c.Compression]
		opts = append(opts, kgo.ProducerBatchCompression(codec))
	}
	sec, err := securityOpts(c)
	if err != nil {
		return nil, c, fmt.Errorf("kafka %s: %w", role, err)
	}
	return append(opts, sec...), c, nil
}

// securityOpts returns the TLS dialer and SASL mechanism of the connection, reading the PEM
// files.
func securityOpts(c kafkaspec.Client) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if c.TLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.CA != "" {
			pem, err := readPEM("ssl.ca.location", c.CA)
			if err != nil {
				return nil, err
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("property ssl.ca.location: no PEM certificate in %s", c.CA)
			}
		}
		if c.CertFile != "" {
			certPEM, err := readPEM("ssl.certificate.location", c.CertFile)
			if err != nil {
				return nil, err
			}
			keyPEM, err := readPEM("ssl.key.location", c.KeyFile)
			if err != nil {
				return nil, err
			}
			cert, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				return nil, fmt.Errorf("properties ssl.certificate.location and ssl.key.location: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if c.SASL {
		var m sasl.Mechanism
		switch c.Mechanism {
		case "PLAIN":
			m = plain.Auth{User: c.Username, Pass: c.Password}.AsMechanism()
		case "SCRAM-SHA-256":
			m = scram.Auth{User: c.Username, Pass: c.Password}.AsSha256Mechanism()
		case "SCRAM-SHA-512":
			m = scram.Auth{User: c.Username, Pass: c.Password}.AsSha512Mechanism()
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// readPEM reads the PEM file a property names: a regular file of at most
// confine.MaxCredentialFileBytes (the TaskManager has confined its path), so that /dev/zero, a
// FIFO or a huge file fails the operator instead of hanging the task or exhausting memory.
func readPEM(property, path string) ([]byte, error) {
	b, err := confine.ReadFile(path, confine.MaxCredentialFileBytes)
	if err != nil {
		return nil, fmt.Errorf("property %s: %w", property, err)
	}
	return b, nil
}
