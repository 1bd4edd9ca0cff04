package dbtest

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/internal/wanproxy"
)

// ViaProxy starts a WAN delay proxy (oneWay each way) in front of the
// server at server (host:port), closed when the test ends, and returns
// address — a URL or DSN naming that server — with the proxy's address in
// its place, and the proxy.
func ViaProxy(tb testing.TB, address, server string, oneWay time.Duration) (string, *wanproxy.Proxy) {
	tb.Helper()
	if !strings.Contains(address, server) {
		tb.Fatalf("ViaProxy: the address does not name server %s", server)
	}
	proxy, err := wanproxy.Start(server, oneWay)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { proxy.Close() })
	return strings.Replace(address, server, proxy.Addr(), 1), proxy
}
