package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// CLI defaults and bounds.
const (
	// DefaultServer is the admin API's server when neither --server nor
	// COURIER_ADMIN_URL is set.
	DefaultServer = "http://127.0.0.1:9464"
	// clientTimeout bounds one CLI request.
	clientTimeout = 60 * time.Second
	// maxResponseBytes bounds the answer the CLI reads.
	maxResponseBytes = 16 << 20
)

// Exit statuses of Command.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

const cliUsage = `usage: courier admin [--server URL] [--admin-token TOKEN] [--json] <command> [args]

The server is --server, else COURIER_ADMIN_URL, else ` + DefaultServer + `;
the token is --admin-token, else COURIER_ADMIN_TOKEN. --json prints the API's JSON.

outbox events:
  stats                                  counts by status and type, stuck rows
  events [--status S] [--type T] [--host H] [--older-than D] [--limit N] [--cursor C]
                                         list (status: pending, processing, stuck, dead_lettered, done)
  events show ID                         one event in full (ID: event UUID or row number)
  events retry ID                        put a dead-lettered event back to pending
  events retry --all [--type T] [--host H] [--older-than D] [--limit N] [--dry-run]
                                         retry the dead-lettered events matching a filter
  events discard ID                      delete a pending or dead-lettered event
JetStream (bus nats):
  exhausted [--event ID] [--reason R] [--limit N] [--cursor C]
                                         messages the consumer gave up on
  exhausted replay RECORD | exhausted replay --event EVENT_ID
deliveries:
  activity ID|URL [--limit N] [--cursor C]
                                         delivery of one local activity, inbox by inbox
  hosts [--limit N] [--cursor C]         remote hosts with health and counts
  hosts show HOST
  hosts pause HOST [--reason TEXT]       hold deliveries (no attempts spent)
  hosts resume HOST
  hosts retry HOST                       make parked and waiting deliveries due now
  hosts drain HOST [--confirm HOST]      discard pending deliveries (without --confirm: how many)
  hosts reset HOST                       forget the failure history
  signatures [--limit N] [--cursor C]    signature schemes learnt per host (RFC 9421, Ed25519)
  signatures show HOST                   one host's schemes, in the order deliveries try them
  signatures forget HOST                 forget them (draft-cavage first again)
inbound:
  inbound                                remote hosts' inbound requests, ignored, throttled, budgets
domain blocks:
  blocks                                 list
  blocks add DOMAIN [--reason TEXT]
  blocks remove DOMAIN
relays:
  relays                                 list, with state (pending, accepted, rejected)
  relays add URL                         subscribe: a relay inbox (.../inbox, Mastodon style) or actor (LitePub)
  relays remove URL                      unsubscribe (sends the Undo)
webhooks:
  webhooks                               endpoints with health and counts
  webhooks show ID
  webhooks add URL [--actor NAME] [--events a,b]
                                         add an endpoint; prints its secret, only this once
  webhooks remove ID                     its queued events discarded (counted), its host forgotten
  webhooks rotate ID                     a new secret (printed once); the old one signs for 24 h more
  webhooks test ID                       enqueue a webhook.test event to it`

// usageErr is a usage error: exit status 2.
type usageErr struct{ msg string }

func (e *usageErr) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageErr{msg: fmt.Sprintf(format, args...)} }

// apiError is an error answer of the admin API.
type apiError struct {
	status int
	body   ErrorBody
}

func (e *apiError) Error() string {
	if e.body.Error != "" {
		return fmt.Sprintf("%s (HTTP %d)", e.body.Error, e.status)
	}
	return fmt.Sprintf("the server answered HTTP %d", e.status)
}

// cli is one run of Command.
type cli struct {
	stdout, stderr io.Writer
	server         string
	token          string
	json           bool
	hc             *http.Client
}

// Command runs `courier admin ARGS...` against a running server's admin
// API and returns the exit status: 0 on success, 1 when the request failed
// (one line on stderr says why), 2 for a usage error. getenv supplies
// COURIER_ADMIN_URL and COURIER_ADMIN_TOKEN.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	c := &cli{stdout: stdout, stderr: stderr, hc: &http.Client{Timeout: clientTimeout}}
	c.server = getenv("COURIER_ADMIN_URL")
	if c.server == "" {
		c.server = DefaultServer
	}
	c.token = getenv("COURIER_ADMIN_TOKEN")
	err := c.run(ctx, args)
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, cliUsage)
		return exitOK
	}
	var ue *usageErr
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "courier admin: %s\n", oneLine(ue.msg))
		fmt.Fprintln(stderr, `run "courier admin --help" for the commands`)
		return exitUsage
	}
	fmt.Fprintf(stderr, "courier admin: %s\n", oneLine(err.Error()))
	return exitError
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	return s
}

// globalFlags binds the flags every command accepts, before or after its
// name, to c.
func (c *cli) globalFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.server, "server", c.server, "admin API base URL (COURIER_ADMIN_URL)")
	fs.StringVar(&c.token, "admin-token", c.token, "admin bearer token (COURIER_ADMIN_TOKEN)")
	fs.BoolVar(&c.json, "json", c.json, "print the API's JSON")
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments, which it returns.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%s: %v", fs.Name(), err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// command is one CLI command: its flags and what it does.
type command struct {
	flags func(fs *flag.FlagSet) func() error // defines flags; the returned check runs after parsing
	nargs []int                               // accepted numbers of positional arguments
	args  string                              // the positional arguments, for messages
	run   func(ctx context.Context, pos []string) error
}

func (c *cli) run(ctx context.Context, args []string) error {
	fs := newFlagSet("courier admin")
	c.globalFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%v", err)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return usagef("no command given")
	}
	group := rest[0]
	verbs, ok := c.commands()[group]
	if !ok {
		if group == "help" {
			return flag.ErrHelp
		}
		return usagef("unknown command %q", group)
	}
	verb := ""
	rest = rest[1:]
	if len(rest) > 0 {
		if _, ok := verbs[rest[0]]; ok && rest[0] != "" {
			verb, rest = rest[0], rest[1:]
		}
	}
	names := make([]string, 0, len(verbs))
	for v := range verbs {
		if v != "" {
			names = append(names, v)
		}
	}
	sort.Strings(names)
	cmd, ok := verbs[verb]
	if !ok {
		return usagef("%s: want one of %s", group, strings.Join(names, ", "))
	}
	name := strings.TrimSpace(group + " " + verb)
	cfs := newFlagSet(name)
	c.globalFlags(cfs)
	check := func() error { return nil }
	if cmd.flags != nil {
		if fn := cmd.flags(cfs); fn != nil {
			check = fn
		}
	}
	pos, err := parseInterleaved(cfs, rest)
	if err != nil {
		return err
	}
	if err := check(); err != nil {
		return err
	}
	okN := false
	for _, n := range cmd.nargs {
		okN = okN || n == len(pos)
	}
	if !okN {
		if cmd.args == "" && verb == "" && len(names) > 0 && len(pos) > 0 {
			// A word after the group that is none of its verbs.
			return usagef("%s: unknown subcommand %q; want one of %s, or none", group, pos[0], strings.Join(names, ", "))
		}
		if cmd.args == "" {
			return usagef("%s takes no arguments", name)
		}
		return usagef("usage: courier admin %s %s", name, cmd.args)
	}
	if err := c.checkServer(); err != nil {
		return err
	}
	return cmd.run(ctx, pos)
}

func (c *cli) checkServer() error {
	u, err := url.Parse(c.server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("server %q: want an http or https URL such as %s", c.server, DefaultServer)
	}
	if c.token == "" {
		return usagef("no admin token: pass --admin-token or set COURIER_ADMIN_TOKEN")
	}
	return nil
}

// request sends one request to the admin API and decodes a 2xx answer into
// out (when non-nil); the raw body is returned for --json.
func (c *cli) request(ctx context.Context, method, path string, query url.Values, body any, out any) ([]byte, error) {
	u := strings.TrimSuffix(c.server, "/") + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, c.server, unwrapURLError(err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read answer of %s: %w", path, err)
	}
	if len(raw) > maxResponseBytes {
		return nil, fmt.Errorf("answer of %s is over %d bytes", path, maxResponseBytes)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := &apiError{status: resp.StatusCode}
		_ = json.Unmarshal(raw, &e.body) // a non-JSON answer keeps the status alone
		return raw, e
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return raw, fmt.Errorf("answer of %s is not the expected JSON: %w", path, err)
		}
	}
	return raw, nil
}

// unwrapURLError drops the *url.Error wrapper, whose text repeats the URL.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// show prints the raw JSON with --json, else calls table.
func (c *cli) show(raw []byte, table func(w io.Writer)) error {
	if c.json {
		_, err := c.stdout.Write(raw)
		if len(raw) > 0 && raw[len(raw)-1] != '\n' {
			fmt.Fprintln(c.stdout)
		}
		return err
	}
	table(c.stdout)
	return nil
}

// get fetches path into out and shows it.
func (c *cli) get(ctx context.Context, path string, q url.Values, out any, table func(w io.Writer)) error {
	raw, err := c.request(ctx, http.MethodGet, path, q, nil, out)
	if err != nil {
		return err
	}
	return c.show(raw, table)
}

// action posts to path and prints the result's message.
func (c *cli) action(ctx context.Context, method, path string, q url.Values, body any) error {
	var res ActionResult
	raw, err := c.request(ctx, method, path, q, body, &res)
	if err != nil {
		return err
	}
	return c.show(raw, func(w io.Writer) { fmt.Fprintln(w, actionLine(res)) })
}

func esc(s string) string { return url.PathEscape(s) }

// setIf adds a query parameter when v is not empty.
func setIf(q url.Values, k, v string) {
	if v != "" {
		q.Set(k, v)
	}
}

// commands lists the CLI: group, then verb ("" is the group's default).
func (c *cli) commands() map[string]map[string]command {
	var (
		status, typ, host, older, cursor, reason, confirm, eventID string
		limit                                                      int
		all, dry                                                   bool
	)
	limitFlag := func(fs *flag.FlagSet) { fs.IntVar(&limit, "limit", 0, "page size") }
	// pageFlags and pageQuery are the paging of a listing: --cursor and
	// --limit.
	pageFlags := func(fs *flag.FlagSet) func() error {
		fs.StringVar(&cursor, "cursor", "", "continue a listing")
		limitFlag(fs)
		return nil
	}
	pageQuery := func(q url.Values) url.Values {
		setIf(q, "cursor", cursor)
		if limit > 0 {
			q.Set("limit", strconv.Itoa(limit))
		}
		return q
	}
	filterFlags := func(fs *flag.FlagSet) {
		fs.StringVar(&typ, "type", "", "event type")
		fs.StringVar(&host, "host", "", "target host")
		fs.StringVar(&older, "older-than", "", "only events enqueued longer ago (30m, 2h, 3d)")
	}
	filterQuery := func() url.Values {
		q := url.Values{}
		setIf(q, "status", status)
		setIf(q, "type", typ)
		setIf(q, "host", host)
		setIf(q, "older_than", older)
		return pageQuery(q)
	}
	listEvents := command{
		flags: func(fs *flag.FlagSet) func() error {
			fs.StringVar(&status, "status", "", "pending, processing, stuck, dead_lettered or done")
			filterFlags(fs)
			return pageFlags(fs)
		},
		nargs: []int{0},
		run: func(ctx context.Context, _ []string) error {
			var out EventList
			return c.get(ctx, "/admin/events", filterQuery(), &out, func(w io.Writer) {
				renderEvents(w, out, c.nextHint("events", filterQuery(), out.NextCursor))
			})
		},
	}
	hostVerb := func(verb string) command {
		return command{nargs: []int{1}, args: "HOST", run: func(ctx context.Context, pos []string) error {
			return c.action(ctx, http.MethodPost, "/admin/hosts/"+esc(pos[0])+"/"+verb, nil, nil)
		}}
	}
	return map[string]map[string]command{
		"stats": {"": {nargs: []int{0}, run: func(ctx context.Context, _ []string) error {
			var out Stats
			return c.get(ctx, "/admin/stats", nil, &out, func(w io.Writer) { renderStats(w, out) })
		}}},
		"inbound": {"": {nargs: []int{0}, run: func(ctx context.Context, _ []string) error {
			var out InboundHosts
			return c.get(ctx, "/admin/inbound", nil, &out, func(w io.Writer) { renderInbound(w, out) })
		}}},
		"events": {
			"":     listEvents,
			"list": listEvents,
			"show": {nargs: []int{1}, args: "ID", run: func(ctx context.Context, pos []string) error {
				var out EventDetail
				return c.get(ctx, "/admin/events/"+esc(pos[0]), nil, &out, func(w io.Writer) { renderEvent(w, out) })
			}},
			"retry": {
				flags: func(fs *flag.FlagSet) func() error {
					fs.BoolVar(&all, "all", false, "retry every dead-lettered event matching the filter")
					fs.BoolVar(&dry, "dry-run", false, "only count what --all would retry")
					filterFlags(fs)
					limitFlag(fs)
					return func() error {
						if !all && (typ != "" || host != "" || older != "" || limit != 0 || dry) {
							return usagef("events retry: --type, --host, --older-than, --limit and --dry-run need --all")
						}
						return nil
					}
				},
				nargs: []int{0, 1}, args: "ID | --all [filters]",
				run: func(ctx context.Context, pos []string) error {
					switch {
					case all && len(pos) == 1:
						return usagef("events retry: give an ID or --all, not both")
					case !all && len(pos) == 0:
						return usagef("usage: courier admin events retry ID | --all [filters]")
					case len(pos) == 1:
						return c.action(ctx, http.MethodPost, "/admin/events/"+esc(pos[0])+"/retry", nil, nil)
					}
					q := filterQuery()
					if dry {
						q.Set("dry_run", "true")
					}
					var out RetryResult
					raw, err := c.request(ctx, http.MethodPost, "/admin/events/retry", q, nil, &out)
					if err != nil {
						return err
					}
					return c.show(raw, func(w io.Writer) { renderRetry(w, out) })
				},
			},
			"discard": {nargs: []int{1}, args: "ID", run: func(ctx context.Context, pos []string) error {
				return c.action(ctx, http.MethodPost, "/admin/events/"+esc(pos[0])+"/discard", nil, nil)
			}},
		},
		"exhausted": {
			"": {
				flags: func(fs *flag.FlagSet) func() error {
					fs.StringVar(&eventID, "event", "", "only the records of this event")
					fs.StringVar(&reason, "reason", "", "max_deliveries or terminated")
					return pageFlags(fs)
				},
				nargs: []int{0},
				run: func(ctx context.Context, _ []string) error {
					q := url.Values{}
					setIf(q, "event_id", eventID)
					setIf(q, "reason", reason)
					q = pageQuery(q)
					var out ExhaustedList
					return c.get(ctx, "/admin/jetstream/exhausted", q, &out, func(w io.Writer) {
						renderExhausted(w, out, c.nextHint("exhausted", q, out.NextCursor))
					})
				},
			},
			"replay": {
				flags: func(fs *flag.FlagSet) func() error {
					fs.StringVar(&eventID, "event", "", "replay the latest record of this event")
					return nil
				},
				nargs: []int{0, 1}, args: "RECORD | --event EVENT_ID",
				run: func(ctx context.Context, pos []string) error {
					switch {
					case eventID != "" && len(pos) == 0:
						return c.action(ctx, http.MethodPost, "/admin/events/"+esc(eventID)+"/replay", nil, nil)
					case eventID == "" && len(pos) == 1:
						return c.action(ctx, http.MethodPost, "/admin/jetstream/exhausted/"+esc(pos[0])+"/replay", nil, nil)
					}
					return usagef("usage: courier admin exhausted replay RECORD | --event EVENT_ID")
				},
			},
		},
		"activity": {"": {
			flags: pageFlags,
			nargs: []int{1}, args: "ID|URL [--limit N] [--cursor C]",
			run: func(ctx context.Context, pos []string) error {
				q := pageQuery(url.Values{})
				id := activityRef(pos[0])
				var out ActivityStatus
				return c.get(ctx, "/admin/activities/"+esc(id), q, &out, func(w io.Writer) {
					renderActivity(w, out, c.nextHint("activity "+id, q, out.NextCursor))
				})
			},
		}},
		"hosts": {
			"": {
				flags: pageFlags,
				nargs: []int{0},
				run: func(ctx context.Context, _ []string) error {
					q := pageQuery(url.Values{})
					var out HostList
					return c.get(ctx, "/admin/hosts", q, &out, func(w io.Writer) {
						renderHosts(w, out, c.nextHint("hosts", q, out.NextCursor))
					})
				},
			},
			"show": {nargs: []int{1}, args: "HOST", run: func(ctx context.Context, pos []string) error {
				var out Host
				return c.get(ctx, "/admin/hosts/"+esc(pos[0]), nil, &out, func(w io.Writer) { renderHost(w, out) })
			}},
			"pause": {
				flags: func(fs *flag.FlagSet) func() error {
					fs.StringVar(&reason, "reason", "", "why (shown with the host)")
					return nil
				},
				nargs: []int{1}, args: "HOST [--reason TEXT]",
				run: func(ctx context.Context, pos []string) error {
					q := url.Values{}
					setIf(q, "reason", reason)
					return c.action(ctx, http.MethodPost, "/admin/hosts/"+esc(pos[0])+"/pause", q, nil)
				},
			},
			"resume": hostVerb("resume"),
			"retry":  hostVerb("retry"),
			"reset":  hostVerb("reset"),
			"drain": {
				flags: func(fs *flag.FlagSet) func() error {
					fs.StringVar(&confirm, "confirm", "", "the host's name again, to discard for real")
					return nil
				},
				nargs: []int{1}, args: "HOST [--confirm HOST]",
				run: func(ctx context.Context, pos []string) error {
					q := url.Values{}
					setIf(q, "confirm", confirm)
					err := c.action(ctx, http.MethodPost, "/admin/hosts/"+esc(pos[0])+"/drain", q, nil)
					var ae *apiError
					if errors.As(err, &ae) && ae.body.Code == ECONFIRM {
						return fmt.Errorf("%s (nothing was discarded)", strings.Replace(ae.body.Error,
							"confirm="+pos[0], "--confirm "+pos[0], 1))
					}
					return err
				},
			},
		},
		"signatures": {
			"": {
				flags: pageFlags,
				nargs: []int{0},
				run: func(ctx context.Context, _ []string) error {
					q := pageQuery(url.Values{})
					var out SignatureList
					return c.get(ctx, "/admin/signatures", q, &out, func(w io.Writer) {
						renderSignatures(w, out, c.nextHint("signatures", q, out.NextCursor))
					})
				},
			},
			"show": {nargs: []int{1}, args: "HOST", run: func(ctx context.Context, pos []string) error {
				var out SignatureStatus
				return c.get(ctx, "/admin/signatures/"+esc(pos[0]), nil, &out, func(w io.Writer) { renderSignature(w, out) })
			}},
			"forget": {nargs: []int{1}, args: "HOST", run: func(ctx context.Context, pos []string) error {
				return c.action(ctx, http.MethodDelete, "/admin/signatures/"+esc(pos[0]), nil, nil)
			}},
		},
		"blocks": {
			"": {nargs: []int{0}, run: func(ctx context.Context, _ []string) error {
				var out DomainBlockList
				return c.get(ctx, "/admin/domain-blocks", nil, &out, func(w io.Writer) { renderBlocks(w, out) })
			}},
			"add": {
				flags: func(fs *flag.FlagSet) func() error {
					fs.StringVar(&reason, "reason", "", "why the domain is blocked")
					return nil
				},
				nargs: []int{1}, args: "DOMAIN [--reason TEXT]",
				run: func(ctx context.Context, pos []string) error {
					var out DomainBlock
					raw, err := c.request(ctx, http.MethodPost, "/admin/domain-blocks", nil,
						blockRequest{Domain: pos[0], Reason: reason}, &out)
					if err != nil {
						return err
					}
					return c.show(raw, func(w io.Writer) { fmt.Fprintf(w, "blocked %s\n", out.Domain) })
				},
			},
			"remove": {nargs: []int{1}, args: "DOMAIN", run: func(ctx context.Context, pos []string) error {
				return c.action(ctx, http.MethodDelete, "/admin/domain-blocks/"+esc(pos[0]), nil, nil)
			}},
		},
		"relays": {
			"": {nargs: []int{0}, run: func(ctx context.Context, _ []string) error {
				var out RelayList
				return c.get(ctx, "/admin/relays", nil, &out, func(w io.Writer) { renderRelays(w, out) })
			}},
			"add": {nargs: []int{1}, args: "URL", run: func(ctx context.Context, pos []string) error {
				var out RelayInfo
				raw, err := c.request(ctx, http.MethodPost, "/admin/relays", nil, relayRequest{URL: pos[0]}, &out)
				if err != nil {
					return err
				}
				return c.show(raw, func(w io.Writer) { fmt.Fprintf(w, "relay %s (%s): %s\n", out.URL, out.Style, out.State) })
			}},
			"remove": {nargs: []int{1}, args: "URL", run: func(ctx context.Context, pos []string) error {
				return c.action(ctx, http.MethodDelete, "/admin/relays", nil, relayRequest{URL: pos[0]})
			}},
		},
		"webhooks": c.webhookCommands(),
	}
}

// activityRef accepts an activity's URL as well as its id: the last path
// segment of /activities/{id}.
func activityRef(s string) string {
	if strings.Contains(s, "://") {
		if u, err := url.Parse(s); err == nil {
			p := strings.TrimSuffix(u.Path, "/")
			return p[strings.LastIndexByte(p, '/')+1:]
		}
	}
	return s
}

// nextHint is the line telling how to see the next page ("" when none):
// the same command with the same filters and the new cursor.
func (c *cli) nextHint(cmd string, q url.Values, next string) string {
	if next == "" {
		return ""
	}
	flagOf := map[string]string{"status": "--status", "type": "--type", "host": "--host",
		"older_than": "--older-than", "limit": "--limit", "event_id": "--event", "reason": "--reason"}
	keys := make([]string, 0, len(q))
	for k := range q {
		if flagOf[k] != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("more: courier admin " + cmd)
	for _, k := range keys {
		b.WriteString(" " + flagOf[k] + " " + q.Get(k))
	}
	b.WriteString(" --cursor " + next)
	return b.String()
}
