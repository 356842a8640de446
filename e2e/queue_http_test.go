package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/controller"
	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestQueueEndpoint (issue 34, item 9): GET /v1/queue on the controller,
// on the production-shaped cluster (ACLs, mTLS), answers with the caller's
// own Nomad token: research's token reads research's queue — its waiting
// job, its position and why — and is refused ml's queue and the whole
// cluster's; the operator's token reads the whole cluster's. A call with
// no token is refused (401): read with the controller's own, it showed
// every tenant's queue to anyone.
func TestQueueEndpoint(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{}, "research", "ml")
	research := c.aclToken("team-research", fmt.Sprintf(teamRules, "research"), userACL(t, "research"))
	ctl := c.startController("ctl", writePolicy(t, tenantPolicy), "-listen", "127.0.0.1:0")
	c.work("first", "research", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"research/first": 1})
	c.work("second", "research", "training", 4, 1, "priority", "40")

	var addr string
	testnomad.WaitFor(t, 10*time.Second, "the controller's address in the log", func() (bool, string) {
		if m := listenRE.FindStringSubmatch(ctl.Log()); m != nil {
			addr = m[1]
		}
		return addr != "", ""
	})
	get := func(token, query string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/queue"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("X-Nomad-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var queue []controller.QueueEntry
	testnomad.WaitFor(t, 30*time.Second, "research's queue with its waiting job", func() (bool, string) {
		code, body := get(research, "?namespace=research")
		queue = nil
		_ = json.Unmarshal([]byte(body), &queue)
		return code == http.StatusOK && len(queue) == 1 && queue[0].Job == "research/second", fmt.Sprintf("%d %s", code, body)
	})
	if q := queue[0]; q.Position != 1 || q.Reason == "" {
		t.Errorf("research/second: position %d, reason %q", q.Position, q.Reason)
	}
	for _, tc := range []struct{ name, token, query string }{
		{"research's token and ml's queue", research, "?namespace=ml"},
		{"research's token and the whole cluster's", research, ""},
	} {
		if code, body := get(tc.token, tc.query); code != http.StatusForbidden || !strings.Contains(body, "Permission denied") {
			t.Errorf("%s: %d %s, want 403", tc.name, code, body)
		}
	}
	// Without a token the controller's own would have been used (Nomad's
	// api client sends its own when a request has none): refused.
	if code, body := get("", "?namespace=research"); code != http.StatusUnauthorized || !strings.Contains(body, "a Nomad token is required") {
		t.Errorf("no token: %d %s, want 401", code, body)
	}
	// The same for /v1/job/check: it planned the job with the
	// controller's token.
	resp, err := http.Post("http://"+addr+"/v1/job/check", "application/json", strings.NewReader(`{"Job": {"ID": "x", "Namespace": "ml"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/v1/job/check with no token: %d, want 401", resp.StatusCode)
	}
	if code, body := get(prodMgmtToken, ""); code != http.StatusOK || !strings.Contains(body, `"research/second"`) {
		t.Errorf("the operator's token: %d %s", code, body)
	}
}
