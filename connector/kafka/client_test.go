package kafka

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/goflink/goflink/connector/kafka/kafkaspec"
	"github.com/goflink/goflink/internal/confine"
	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/operator/operatortest"
	"github.com/goflink/goflink/record"
)

// testPKI is a throwaway CA with a server certificate for 127.0.0.1 and a client certificate,
// written as PEM files.
type testPKI struct {
	server                    tls.Certificate
	pool                      *x509.CertPool
	caFile, certFile, keyFile string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "goflink test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, usage x509.ExtKeyUsage, ips ...net.IP) ([]byte, []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "goflink test"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, _ := x509.MarshalECPrivateKey(key)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	}
	p := &testPKI{pool: x509.NewCertPool(), caFile: filepath.Join(dir, "ca.pem"),
		certFile: filepath.Join(dir, "client.pem"), keyFile: filepath.Join(dir, "client.key")}
	p.pool.AddCert(ca)
	sc, sk := issue(2, x509.ExtKeyUsageServerAuth, net.IPv4(127, 0, 0, 1))
	if p.server, err = tls.X509KeyPair(sc, sk); err != nil {
		t.Fatal(err)
	}
	cc, ck := issue(3, x509.ExtKeyUsageClientAuth)
	for f, b := range map[string][]byte{p.caFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), p.certFile: cc, p.keyFile: ck} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// The source and the exactly-once sink connect over TLS with a client certificate and SASL
// (SCRAM-SHA-512 and PLAIN) as the properties say; wrong credentials and files fail Open with
// an error naming the cause.
func TestKafkaSASLAndTLS(t *testing.T) {
	pki := newTestPKI(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "alice", "s3cret"), kfake.Superuser("PLAIN", "bob", "pw"),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pki.server}, ClientCAs: pki.pool, ClientAuth: tls.RequireAndVerifyClientCert}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	seeds := c.ListenAddrs()
	secure := func(mech, user, pass string) map[string]string {
		return map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanism": mech, "sasl.username": user, "sasl.password": pass,
			"ssl.ca.location": pki.caFile, "ssl.certificate.location": pki.certFile, "ssl.key.location": pki.keyFile}
	}

	spec := sinkSpec(seeds, kafkaExactlyOnce, time.Minute)
	spec.Properties = secure("SCRAM-SHA-512", "alice", "s3cret")
	o, err := newKafkaSink(spec, sinkTestSchema)
	if err != nil {
		t.Fatal(err)
	}
	s := o.(*kafkaTxnSink)
	if err := s.InitializeState(operatortest.NewStateContext(0, nil)); err != nil {
		t.Fatal(err)
	}
	if err := s.Open(&operator.Context{JobID: "job1", OperatorName: "sink", Parallelism: 1}, &operatortest.Capture{}); err != nil {
		t.Fatalf("Open over SASL_SSL: %v", err)
	}
	for v := int64(1); v <= 3; v++ {
		if err := s.Process(record.Row{record.IntValue(v)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.EndInput(); err != nil {
		t.Fatalf("EndInput (commit over SASL_SSL): %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	r := openKafkaRun(t, &kafkaspec.SourceConfig{Brokers: seeds, Topics: []string{"out"}, Properties: secure("PLAIN", "bob", "pw")}, 0, 1, 0, nil)
	r.read(t, 3)
	if got := strings.Join(rawValues(r.out.Rows), " "); got != `{"n":1} {"n":2} {"n":3}` {
		t.Errorf("read back over SASL_SSL: %s", got)
	}

	for name, tc := range map[string]struct {
		props map[string]string
		want  string
	}{
		// kfake closes the connection (a real broker answers SASL_AUTHENTICATION_FAILED).
		"wrong password": {secure("SCRAM-SHA-512", "alice", "guess"), "kafka source: list topics"},
		"missing CA file": {func() map[string]string {
			p := secure("PLAIN", "bob", "pw")
			p["ssl.ca.location"] = filepath.Join(t.TempDir(), "none.pem")
			return p
		}(), "property ssl.ca.location"},
		"bad protocol": {map[string]string{"security.protocol": "TLS"}, `property security.protocol: unknown "TLS"`},
	} {
		k, err := newKafkaSource(&kafkaspec.SourceConfig{Brokers: seeds, Topics: []string{"out"}, Properties: tc.props})
		if err != nil {
			t.Fatal(err)
		}
		if err := k.InitializeState(operatortest.NewStateContext(0, nil)); err != nil {
			t.Fatal(err)
		}
		err = k.Open(&operator.Context{OperatorName: "in", Parallelism: 1, Now: time.Now}, &operatortest.Capture{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Open = %v, want an error with %q", name, err, tc.want)
		}
		_ = k.Close()
	}
}

// TestKafkaCredentialFilesAreBounded: the PEM files the properties name are read only when
// they are regular files of at most confine.MaxCredentialFileBytes. A FIFO (which would block
// the task forever), a directory or a huge file fails with an error naming the property. (Not
// /dev/zero here: without the bound it would be read until memory runs out.)
func TestKafkaCredentialFilesAreBounded(t *testing.T) {
	pki := newTestPKI(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A reader stuck in opening the FIFO (a build without the bound) is released at the end.
	t.Cleanup(func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	huge := filepath.Join(dir, "huge.pem")
	if err := os.WriteFile(huge, make([]byte, confine.MaxCredentialFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		property, path, want string
	}{
		{"ssl.ca.location", fifo, "is not a regular file (it is a FIFO)"},
		{"ssl.ca.location", huge, fmt.Sprintf("has %d bytes, more than the limit of %d", confine.MaxCredentialFileBytes+1, confine.MaxCredentialFileBytes)},
		{"ssl.ca.location", dir, "is not a regular file (it is a directory)"},
		{"ssl.certificate.location", fifo, "is not a regular file (it is a FIFO)"},
		{"ssl.key.location", huge, "more than the limit"},
	} {
		props := map[string]string{"security.protocol": "SSL", "ssl.ca.location": pki.caFile,
			"ssl.certificate.location": pki.certFile, "ssl.key.location": pki.keyFile}
		props[tc.property] = tc.path
		done := make(chan error, 1)
		go func() {
			_, _, err := clientOpts("source", []string{"127.0.0.1:1"}, props, false)
			done <- err
		}()
		select {
		case err := <-done:
			if want := "property " + tc.property + ": "; err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s = %s: clientOpts() = %v, want an error with %q and %q", tc.property, tc.path, err, want, tc.want)
			}
		case <-time.After(10 * time.Second):
			if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close() // release the reader
			}
			err := <-done
			t.Errorf("%s = %s: clientOpts() blocked reading the file (released, it returned %v)", tc.property, tc.path, err)
		}
	}
	if _, _, err := clientOpts("source", []string{"127.0.0.1:1"}, map[string]string{"security.protocol": "SSL", "ssl.ca.location": pki.caFile,
		"ssl.certificate.location": pki.certFile, "ssl.key.location": pki.keyFile}, false); err != nil {
		t.Errorf("clientOpts(regular PEM files) = %v", err)
	}
}
