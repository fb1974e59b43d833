package security

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Generated names the files Generate writes.
type Generated struct {
	CA, CAKey             string // the cluster's CA (security.ssl.internal.ca; flinkctl --ca)
	Cluster, ClusterKey   string // every process's certificate: server and client, for the hosts
	ClientCA, ClientCAKey string // the clients' CA (security.ssl.rest.ca)
	Client, ClientKey     string // a client certificate of the clients' CA (flinkctl --cert/--key)
	Token                 string // a random bearer token
}

// Generate makes a self-signed CA and a certificate for the cluster's processes (server and
// client authentication, valid for hosts: DNS names or IP addresses) signed by it, a second CA
// for clients and a client certificate it signed (a client must not pass for a cluster
// process), and a random token, into dir (created 0700; keys and the token 0600). It is what
// `flinkctl cert` runs: certificates from Go's crypto/x509, no other tool.
func Generate(dir string, hosts []string, validFor time.Duration) (Generated, error) {
	if len(hosts) == 0 {
		return Generated{}, errors.New("at least one host name or address is needed")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Generated{}, err
	}
	g := GeneratedFiles(dir)
	now := time.Now()
	makeCA := func(cn, certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			Subject: pkix.Name{CommonName: cn}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validFor),
			IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		}
		der, cert, err := sign(tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			return nil, nil, err
		}
		if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
			return nil, nil, err
		}
		return cert, key, writeKey(keyPath, key)
	}
	caCert, caKey, err := makeCA("goflink cluster CA", g.CA, g.CAKey)
	if err != nil {
		return Generated{}, err
	}
	clientCA, clientCAKey, err := makeCA("goflink client CA", g.ClientCA, g.ClientCAKey)
	if err != nil {
		return Generated{}, err
	}
	leaf := func(cn string, usage []x509.ExtKeyUsage, certPath, keyPath string, sans []string, caCert *x509.Certificate, caKey *ecdsa.PrivateKey) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		t := &x509.Certificate{
			Subject: pkix.Name{CommonName: cn}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validFor),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
		}
		for _, h := range sans {
			if ip := net.ParseIP(h); ip != nil {
				t.IPAddresses = append(t.IPAddresses, ip)
			} else {
				t.DNSNames = append(t.DNSNames, h)
			}
		}
		der, _, err := sign(t, caCert, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
			return err
		}
		return writeKey(keyPath, key)
	}
	if err := leaf("goflink cluster", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		g.Cluster, g.ClusterKey, append([]string{InternalServerName}, hosts...), caCert, caKey); err != nil {
		return Generated{}, err
	}
	if err := leaf("goflink client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, g.Client, g.ClientKey, nil, clientCA, clientCAKey); err != nil {
		return Generated{}, err
	}
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return Generated{}, err
	}
	if err := os.WriteFile(g.Token, []byte(hex.EncodeToString(tok)+"\n"), 0o600); err != nil {
		return Generated{}, err
	}
	return g, nil
}

// GeneratedFiles names the files Generate writes into dir.
func GeneratedFiles(dir string) Generated {
	return Generated{
		CA: filepath.Join(dir, "ca.pem"), CAKey: filepath.Join(dir, "ca-key.pem"),
		Cluster: filepath.Join(dir, "cluster.pem"), ClusterKey: filepath.Join(dir, "cluster-key.pem"),
		ClientCA: filepath.Join(dir, "client-ca.pem"), ClientCAKey: filepath.Join(dir, "client-ca-key.pem"),
		Client: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
		Token: filepath.Join(dir, "token"),
	}
}

// Paths lists the files in the order Generate writes them.
func (g Generated) Paths() []string {
	return []string{g.CA, g.CAKey, g.ClientCA, g.ClientCAKey, g.Cluster, g.ClusterKey, g.Client, g.ClientKey, g.Token}
}

func sign(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, key *ecdsa.PrivateKey) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	c, err := x509.ParseCertificate(der)
	return der, c, err
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

// writePEM writes a PEM block atomically (a temporary file renamed over path), so that a
// process reloading the file never reads half of it.
func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
