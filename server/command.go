package server

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/courier-ap/courier/store"
)

// Exit codes of commands.
const (
	exitOK    = 0
	exitError = 1 // the command ran and failed (a taken name, a database error)
	exitUsage = 2 // bad arguments
)

// CreateActorHelp writes the help of `courier actor create`: its usage,
// what NAME may be, and its flags.
func CreateActorHelp(w io.Writer) {
	fmt.Fprint(w, `usage: courier actor create NAME [--display-name TEXT] [--summary TEXT] [--manually-approves-followers] [--json]

Creates a local actor with its key pair and outbox token, and prints its id
and the token (once: only its hash is stored). NAME is 1 to 30 of a-z, 0-9
and _.

flags:
  --display-name TEXT             display name shown by other servers
  --summary TEXT                  profile text
  --manually-approves-followers   ask for approval of each follower
  --json                          print {"id": ..., "token": ...} as one JSON object

It also takes the database and base-URL settings of serve: --db (COURIER_DB)
and --base-url (COURIER_BASE_URL; without it, the base URL the server
recorded in the database).
`)
}

// CreateActorCommand runs `courier actor create NAME [--display-name TEXT]
// [--summary TEXT] [--manually-approves-followers] [--json]`: it creates a
// local actor with its own RSA-2048 key pair and prints its id and the
// bearer token of its outbox, which is shown only this once (only its hash
// is stored). Flags may come before or after NAME. With --json it prints
// one JSON object {"id": ..., "token": ...}. It returns the process exit
// code: 0 on success, 1 when the actor cannot be created (a taken name),
// 2 for bad arguments (a malformed name included). With st nil it only
// checks the arguments (0 when they are good), so that bad ones are
// refused before a database is opened.
func CreateActorCommand(ctx context.Context, st *store.Store, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("courier actor create", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // one line on stderr, below; -h prints the help on stdout
	displayName := fs.String("display-name", "", "display name shown by other servers")
	summary := fs.String("summary", "", "profile text")
	locked := fs.Bool("manually-approves-followers", false, "ask for approval of each follower")
	asJSON := fs.Bool("json", false, `print {"id": ..., "token": ...} as one JSON object`)
	usageLine := "usage: courier actor create NAME [--display-name TEXT] [--summary TEXT] [--manually-approves-followers] [--json]"
	fail := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "courier: actor create: %s; %s\n", fmt.Sprintf(format, args...), usageLine)
		return exitUsage
	}
	// Accept NAME before the flags as well as after them.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			CreateActorHelp(stdout)
			return exitOK
		}
		return fail("%v", err)
	}
	rest := fs.Args()
	if name == "" && len(rest) > 0 {
		name, rest = rest[0], rest[1:]
	}
	switch {
	case name == "":
		return fail("NAME is missing")
	case len(rest) > 0:
		return fail("unexpected argument %q", rest[0])
	case st == nil:
		return exitOK // the arguments checked, before a database is opened
	}
	a, token, err := st.CreateActor(ctx, store.NewActor{
		Name: name, DisplayName: *displayName, Summary: *summary, ManuallyApprovesFollowers: *locked,
	})
	if err != nil {
		if store.ErrorCode(err) == store.EINTERNAL {
			fmt.Fprintf(stderr, "courier: actor create: %v\n", err)
			return exitError
		}
		fmt.Fprintf(stderr, "courier: actor create: %s\n", store.ErrorMessage(err))
		if store.ErrorCode(err) == store.EINVALID {
			return exitUsage
		}
		return exitError
	}
	if *asJSON {
		b, _ := json.Marshal(struct {
			ID    string `json:"id"`
			Token string `json:"token"`
		}{a.URI, token}) // two strings always marshal
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	fmt.Fprintf(stdout, "id: %s\ntoken: %s\n", a.URI, token)
	fmt.Fprintln(stderr, "Keep the token: it is shown only once. Use it as Authorization: Bearer TOKEN on POST "+st.URIs().Outbox(a.Name))
	return exitOK
}
