package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/permission"
)

// natsAccountsCmd prints the nats-server accounts block of AX's roles.
func natsAccountsCmd(g *globals) *cobra.Command {
	var account string
	var executors, producers, operators, events []string
	var producersCancel bool
	cmd := &cobra.Command{
		Use:   "nats-accounts",
		Short: "Print the nats-server accounts block that gives each AX role least privilege (deploy/security)",
		Long: `Prints AX's account for a nats-server configuration: one user per role
(orchestrator, an executor per capability, producers, the mirror, operators)
with the publish and subscribe rights it needs and no more, JetStream
enabled. Passwords are variables (AX_PASSWORD_<USER>) that passwords.conf,
beside the file, defines. Clients of user U connect with --inbox-prefix
_INBOX.U. Without flags it prints deploy/security/accounts.conf.

An executor is CAPABILITY[=TYPE,…]: the user executor-CAPABILITY pulls only
that capability's dispatches and reports only those task types (subject
patterns; default CAPABILITY.>). A producer is NAME[=TYPE,…] (default: any
type; one limited to types cannot submit graphs). The matrix is in
deploy/security/README.md.

Events (ax.event.>, sdk.Client.Signal): the orchestrator and operators
publish any; a producer not limited to types publishes any by default, one
limited to types none, an executor none. --event-subjects USER=SUBJECT,…
replaces that for a producer or an executor user (executor-CAPABILITY):
the event subjects it may publish, without the ax.event. prefix, as
patterns (payment.> or payment.received.*); USER= with nothing after it
allows none. Approving or rejecting an event task (ax approve) is an
operator's command: no other role may.`,
		Example: `  ax nats-accounts > /etc/nats/accounts.conf
  ax nats-accounts --executor email --executor pdf=pdf.render,pdf.merge --producer shop=order.> --operator alice
  ax nats-accounts --producer shop --producer psp --event-subjects psp=payment.> --event-subjects shop=`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			acct, err := buildAccount(account, executors, producers, operators, producersCancel)
			if err != nil {
				return err
			}
			if err := grantEvents(&acct, events); err != nil {
				return usageError(err)
			}
			if g.jsonOutput() {
				return g.printJSON(accountJSONOf(acct))
			}
			conf, err := acct.Conf()
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(g.stdout, conf)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&account, "account", permission.DefaultAccount, "name of AX's account")
	f.StringArrayVar(&executors, "executor", []string{"email=email.>", "pdf=pdf.>"}, "an executor user: CAPABILITY[=TYPE,…] (repeat for each capability)")
	f.StringArrayVar(&producers, "producer", []string{"producer", "producer-email=email.>"}, "a producer user: NAME[=TYPE,…] (repeat)")
	f.StringArrayVar(&operators, "operator", []string{"operator", "console"}, "an operator user (the CLI's commands, the console) (repeat)")
	f.BoolVar(&producersCancel, "producers-cancel", false, "let producers cancel tasks (any task)")
	f.StringArrayVar(&events, "event-subjects", nil, "USER=SUBJECT,…: the events a producer or executor user may publish (patterns without ax.event.; USER= for none) (repeat)")
	return cmd
}

// buildAccount makes the account of the flags: an orchestrator and a
// mirror, and the listed executors, producers and operators.
func buildAccount(name string, executors, producers, operators []string, cancel bool) (permission.Account, error) {
	acct := permission.Account{Name: name, Users: []permission.User{{Name: "orchestrator", Role: permission.Orchestrator}}}
	for _, e := range executors {
		capability, types, hasTypes := strings.Cut(e, "=")
		u := permission.User{Name: "executor-" + capability, Role: permission.Executor, Capability: capability,
			Types: []string{capability + ".>"}}
		if hasTypes {
			u.Types = splitList(types)
		}
		acct.Users = append(acct.Users, u)
	}
	for _, p := range producers {
		name, types, _ := strings.Cut(p, "=")
		acct.Users = append(acct.Users, permission.User{Name: name, Role: permission.Producer, Types: splitList(types), Cancel: cancel})
	}
	acct.Users = append(acct.Users, permission.User{Name: "mirror", Role: permission.Mirror})
	for _, o := range operators {
		acct.Users = append(acct.Users, permission.User{Name: o, Role: permission.Operator})
	}
	return acct, acct.Validate()
}

// grantEvents applies --event-subjects USER=SUBJECT,… to the account's
// producers and executors, then validates it again.
func grantEvents(acct *permission.Account, grants []string) error {
	for _, g := range grants {
		name, list, ok := strings.Cut(g, "=")
		if !ok {
			return fmt.Errorf("--event-subjects %q: want USER=SUBJECT,… (USER= for none)", g)
		}
		i := slices.IndexFunc(acct.Users, func(u permission.User) bool { return u.Name == name })
		switch {
		case i < 0:
			return fmt.Errorf("--event-subjects %q: no user %s (give a --producer, or an executor's user executor-CAPABILITY)", g, name)
		case acct.Users[i].Role != permission.Producer && acct.Users[i].Role != permission.Executor:
			return fmt.Errorf("--event-subjects %q: %s is a %s; only producers and executors take it", g, name, acct.Users[i].Role)
		}
		acct.Users[i].Events = append([]string{}, splitList(list)...) // not nil: none when empty
	}
	return acct.Validate()
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// accountJSON is ax nats-accounts -o json: each user's role and rights.
type accountJSON struct {
	Account string     `json:"account"`
	Users   []userJSON `json:"users"`
}

type userJSON struct {
	Name           string    `json:"name"`
	Role           string    `json:"role"`
	InboxPrefix    string    `json:"inbox_prefix"`
	Publish        rulesJSON `json:"publish"`
	Subscribe      rulesJSON `json:"subscribe"`
	AllowResponses bool      `json:"allow_responses"`
}

type rulesJSON struct {
	Allow []string `json:"allow"`
	Deny  []string `json:"deny"`
}

func accountJSONOf(a permission.Account) accountJSON {
	out := accountJSON{Account: a.Name}
	for _, u := range a.Users {
		p := u.Permissions(a.Capabilities())
		out.Users = append(out.Users, userJSON{Name: u.Name, Role: string(u.Role), InboxPrefix: u.InboxPrefix(),
			Publish: rulesJSON(p.Publish), Subscribe: rulesJSON(p.Subscribe), AllowResponses: p.AllowResponses})
	}
	return out
}
