package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/memory"
	"github.com/levee-go/levee/statuspage"
)

// debugPath is where `levee serve` serves the debug page, on its
// metrics port, and where `levee status` reads it.
const debugPath = "/debug/levee"

// maxStatusBytes bounds what `levee status` reads of a page: the page is
// bounded, and a server that sends more is not one.
const maxStatusBytes = 8 << 20

// mountPage serves the debug page of e at debugPath on mux, keeping the
// last refusals through e's Observer: for the protections that are not
// protect.New's (the static recipe, a policy file), whose page
// protect.Server.DebugHandler makes. mon and mem may be nil.
func mountPage(mux interface {
	Handle(string, http.Handler)
}, e *decide.Engine, mon *cpu.Monitor, mem *memory.Monitor) {
	src := statuspage.Sources{Engine: e}
	if mon != nil {
		src.CPU = mon
	}
	if mem != nil {
		src.Memory = mem
	}
	page := statuspage.New(src)
	e.SetObserver(page.Observer(decide.Observer{}))
	mux.Handle(debugPath, page)
}

const statusSummary = `Print what a running levee server is doing, from its debug page
(` + debugPath + ` on the -metrics-addr of levee serve, or wherever a server
mounts protect.Server.DebugHandler): each run limit with its flows and
lanes, each signal of overload against its threshold, the refusals by
guard, reason and evidence, the last refusals, and the learner's last moves.

ADDR is host:port (the page's path is added) or a URL.

Usage: levee status [flags] ADDR`

// status prints the debug page of the server at ADDR.
func (c *cli) status(ctx context.Context, args []string) error {
	fs := c.newFlagSet("status", statusSummary)
	asJSON := fs.Bool("json", false, "print the page's JSON form instead of its text")
	timeout := fs.Duration("timeout", 5*time.Second, "give up on the server after this `duration`")
	// ADDR may come before the flags or after them.
	if err := fs.Parse(args); err != nil {
		return c.parse(fs, args)
	}
	var addr string
	if fs.NArg() > 0 {
		addr = fs.Arg(0)
		if err := c.parse(fs, fs.Args()[1:]); err != nil {
			return err
		}
	}
	if addr == "" {
		return usageError("want the address of the server's debug page: levee status [flags] ADDR (see levee status -h)")
	}
	if err := positive("timeout", *timeout); err != nil {
		return err
	}
	u, err := pageURL(addr, *asJSON)
	if err != nil {
		return usageError("%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return usageError("ADDR %q: %v", addr, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reading %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxStatusBytes))
	if err != nil {
		return fmt.Errorf("reading %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reading %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body[:min(len(body), 200)])))
	}
	_, err = c.stdout.Write(body)
	return err
}

// pageURL is the URL of the debug page at addr: host:port, or a URL whose
// path, if it has none, is debugPath.
func pageURL(addr string, asJSON bool) (string, error) {
	raw := addr
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("ADDR %q: want host:port or an http(s) URL", addr)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = debugPath
	}
	if asJSON {
		q := u.Query()
		q.Set("format", "json")
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}
