package connectsuite

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/levee-go/levee/admission"
	v1 "github.com/levee-go/levee/conformance/connectsuite/internal/conformancev1"
	"github.com/levee-go/levee/conformance/connectsuite/internal/conformancev1/conformancev1connect"
	"github.com/levee-go/levee/connectguard"
	"github.com/levee-go/levee/protect"
)

// report is what a server under test tells the test when it stops: what
// it served and what levee decided.
type report struct {
	Protocol    string                 `json:"protocol"`
	HTTPVersion string                 `json:"http_version"`
	TLS         bool                   `json:"tls"`
	Stats       []admission.GuardStats `json:"stats"`
}

// serve is the server under test, as the conformance runner starts it
// (docs/testing_servers.md in connectrpc/conformance): it reads a
// size-delimited ServerCompatRequest from in, serves the conformance
// service on a loopback port as the request asks, protected by
// protect.New() through connectguard's middleware and interceptor, writes
// a size-delimited ServerCompatResponse to out, and serves until ctx
// ends (the runner's SIGTERM). It then writes a report (JSON) in
// reportDir, if not empty.
func serve(ctx context.Context, in io.Reader, out io.Writer, reportDir string) error {
	var req v1.ServerCompatRequest
	if err := readDelimited(in, &req); err != nil {
		return fmt.Errorf("read ServerCompatRequest: %w", err)
	}

	p, err := protect.New()
	if err != nil {
		return err
	}
	defer p.Stop()
	g, err := connectguard.New(p.Engine())
	if err != nil {
		return err
	}
	opts := []connect.HandlerOption{connect.WithInterceptors(g.Interceptor())}
	if n := req.GetMessageReceiveLimit(); n > 0 {
		opts = append(opts, connect.WithReadMaxBytes(int(n)))
	}
	mux := http.NewServeMux()
	mux.Handle(conformancev1connect.NewConformanceServiceHandler(service{}, opts...))

	hs := &http.Server{
		Handler:           withQuery(g.Middleware(mux)),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
		Protocols:         new(http.Protocols),
	}
	hs.Protocols.SetHTTP1(true)
	switch req.GetHttpVersion() {
	case v1.HTTPVersion_HTTP_VERSION_1:
	case v1.HTTPVersion_HTTP_VERSION_2:
		hs.Protocols.SetHTTP2(true)
		hs.Protocols.SetUnencryptedHTTP2(true)
	default:
		return fmt.Errorf("unsupported HTTP version %v", req.GetHttpVersion())
	}
	var cert []byte
	if req.GetUseTls() {
		if hs.TLSConfig, err = tlsConfig(&req); err != nil {
			return err
		}
		cert = req.GetServerCreds().GetCert()
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() {
		if hs.TLSConfig != nil {
			served <- hs.ServeTLS(lis, "", "")
		} else {
			served <- hs.Serve(lis)
		}
	}()
	addr := lis.Addr().(*net.TCPAddr)
	res := &v1.ServerCompatResponse{Host: "127.0.0.1", Port: uint32(addr.Port), PemCert: cert}
	if err := writeDelimited(out, res); err != nil {
		_ = hs.Close()
		<-served
		return fmt.Errorf("write ServerCompatResponse: %w", err)
	}

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// The runner stops a server once its cases are done (and waits for it
	// only briefly): every call was decided by then.
	_ = hs.Close()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if reportDir == "" {
		return nil
	}
	data, err := json.Marshal(report{
		Protocol:    req.GetProtocol().String(),
		HTTPVersion: req.GetHttpVersion().String(),
		TLS:         req.GetUseTls(),
		Stats:       p.Engine().Stats(),
	})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(reportDir, fmt.Sprintf("server-%d.json", os.Getpid())), data, 0o644)
}

// tlsConfig is the server's TLS configuration: the runner's certificate,
// and client certificates required and verified when the runner gives
// their CA.
func tlsConfig(req *v1.ServerCompatRequest) (*tls.Config, error) {
	creds := req.GetServerCreds()
	cert, err := tls.X509KeyPair(creds.GetCert(), creds.GetKey())
	if err != nil {
		return nil, fmt.Errorf("server credentials: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if ca := req.GetClientTlsCert(); len(ca) > 0 {
		c.ClientCAs = x509.NewCertPool()
		if !c.ClientCAs.AppendCertsFromPEM(ca) {
			return nil, errors.New("client certificate: no PEM certificate")
		}
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// maxDelimited bounds a size-delimited message from the runner.
const maxDelimited = 1 << 20

// readDelimited reads msg from r: its size (4 bytes, big-endian), then
// its bytes.
func readDelimited(r io.Reader, msg proto.Message) error {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > maxDelimited {
		return fmt.Errorf("message of %d bytes, more than %d", n, maxDelimited)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(r, data); err != nil {
		return err
	}
	return proto.Unmarshal(data, msg)
}

// writeDelimited writes msg to w as readDelimited reads it.
func writeDelimited(w io.Writer, msg proto.Message) error {
	data, err := proto.Marshal(msg)
	if err != nil {
		return err
	}
	out := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(data)), uint32(len(data)))
	_, err = w.Write(append(out, data...))
	return err
}
