package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// subcommandDoc is what `opsbot SUBCOMMAND --help` says about a subcommand.
type subcommandDoc struct {
	usage    string
	what     string
	examples []string
}

// quoteNote is the note every help of a subcommand that takes chat commands ends with.
const quoteNote = `Quote each chat command as one argument: opsbot run --lab 'mtp steps 10' 'gpu status'
(unquoted, the shell splits it into words: mtp, steps, 10). Its own flags, such as --dry-run,
go inside the quotes: 'mtp steps 4 --dry-run'. 'help' lists the chat commands, 'help COMMAND'
explains one; neither needs --lab or --config.`

// subcommands documents each subcommand, by the name its flag set carries
// ("opsbot run"), for --help and for the usage printed after a bad flag.
var subcommands = map[string]subcommandDoc{
	"opsbot run": {
		usage: "opsbot run [--config FILE | --lab [--lab-faults LIST] [--lab-unit FILE] [--lab-replicas N]] [--json] [--chart-dir DIR] [--as ID] [--yes] [-v] 'CMD' ['CMD' ...]",
		what: "Runs chat commands through the same dispatcher as Slack and Matrix, one after the other, and prints\n" +
			"each job's status thread (or, with --json, one JSON object per command on stdout, and on stderr only\n" +
			"when a job waits for another's service and when it has it). Flags may come before or\n" +
			"after the commands. Exit 2 when a command does not parse (then none runs); otherwise the highest\n" +
			"of the commands' codes: 0 when every job succeeded or was answered, 1 when one failed, was refused\n" +
			"or cancelled, or was turned down as it ran (`job 7` of a job that does not exist), 3 when a job was\n" +
			"done on its host but its store refused its record: the run waits up to 5 minutes for the store\n" +
			"(saying so every 30 s; Ctrl-C gives up) and prints the job's outcome either way.\n" +
			"--lab alone keeps no store: `job 1` in a later run finds nothing. --config FILE --lab runs on the lab\n" +
			"with FILE's store, which lasts. A chart (sweep, mtp tune) is saved as a new file in --chart-dir\n" +
			"(default: the current directory), chart-job-N-YYYYMMDD-HHMMSS.png, and its path printed (with\n" +
			"--json: \"chart_path\"); a directory that cannot be written to is refused before anything runs.",
		examples: []string{
			"opsbot run 'help'",
			"opsbot run 'help mtp steps'",
			"opsbot run --lab 'gpu status' 'mtp show'",
			"opsbot run --lab 'mtp steps 4 --dry-run'",
			"opsbot run --lab --yes 'gpu recover'",
			"opsbot run --config /etc/opsbot/opsbot.yaml --json 'mtp steps 10 qwen'",
		},
	},
	"opsbot demo": {
		usage: "opsbot demo [--lab-faults LIST] [--lab-unit FILE] [--lab-replicas N] [--chart-dir DIR] [-v]",
		what: "Starts the lab (a simulated GPU node with services qwen and coder) and a prompt: type chat\n" +
			"commands one a line and watch their status threads. Ctrl-D (or quit) ends it after the jobs\n" +
			"already started; Ctrl-C stops them. Charts are saved as new files in --chart-dir (default: the\n" +
			"current directory) and their paths printed.",
		examples: []string{"opsbot demo", "opsbot demo --lab-faults orphans"},
	},
	"opsbot lab": {
		usage: "opsbot lab [--faults LIST] [--unit FILE] [--engine sglang|vllm] [--config-out FILE] [--services N [--per-node K] | --replicas N] [-v]",
		what: "Runs the simulated GPU node standalone until Ctrl-C, and writes an opsbot config that reaches it,\n" +
			"for `opsbot run --config` from another terminal.",
		examples: []string{"opsbot lab --config-out ~/opsbot-lab/opsbot.yaml", "opsbot lab --faults orphans,slow-load=5s --engine vllm",
			"opsbot lab --replicas 4 --config-out ~/opsbot-lab/replicas.yaml",
			"opsbot lab --services 512 --per-node 2 --faults orphans --config-out ~/opsbot-lab/fleet.yaml"},
	},
	"opsbot bench": {
		usage: "opsbot bench --url URL | --config FILE --service NAME [--model M] [--prompts N] [--concurrency C] [--in I] [--out O]\n" +
			"       [--rate R] [--warmup N] [--timeout D] [--chat] [--engine sglang|vllm|auto] [--json]",
		what: "Benchmarks any OpenAI-compatible server (sglang bench_serving definitions): tok/s, latency and\n" +
			"acceptance. With --config and --service, the result joins the service's history (shown as\n" +
			"\"opsbot bench\" there).",
		examples: []string{
			"opsbot bench --url http://127.0.0.1:30000 --prompts 100 --concurrency 8 --in 512 --out 256",
			"opsbot bench --config opsbot.yaml --service qwen",
		},
	},
	"opsbot config check": {
		usage:    "opsbot config check --config FILE [--lab]",
		what:     "Validates a config file and prints the effective config with secrets redacted. With --lab, the\nfile is checked as `opsbot serve --lab` runs it, on top of the lab's config.",
		examples: []string{"opsbot config check --config deploy/opsbot.example.yaml"},
	},
	"opsbot serve": {
		usage: "opsbot serve --config FILE [--lab [--lab-faults LIST] [--lab-unit FILE] [--lab-replicas N]]",
		what: "Runs the bot as a service: the chat adapters the config enables, the job engine, the scheduler,\n" +
			"the watchdog, and the HTTP listener (/healthz, /readyz, /metrics) of http.listen. SIGTERM or SIGINT\n" +
			"stops it within limits.shutdown_grace (a second one at once), SIGHUP reloads the config. With --lab\n" +
			"the lab supplies ssh, hosts, services, default_service and bench (the config may still set the watchdog's\n" +
			"options of the lab's services: services.qwen.auto_recover).",
		examples: []string{"opsbot serve --config /etc/opsbot/opsbot.yaml", "opsbot serve --config chat-only.yaml --lab --lab-faults orphans"},
	},
	"opsbot store backup": {
		usage:    "opsbot store backup [--config FILE] DEST",
		what:     "Writes a consistent copy of the store (0600) to DEST, also while serve runs. The copy holds the\naudit log and, with Matrix encryption, the bot's keys: keep it private.",
		examples: []string{"opsbot store backup --config /etc/opsbot/opsbot.yaml /var/backups/opsbot.db"},
	},
	"opsbot store copy": {
		usage: "opsbot store copy --config FROM.yaml [--live] TO.yaml",
		what: "Copies every job, event, bench result, schedule and firing, incident, silence, chat claim, audit\n" +
			"entry, kv row and the Matrix encryption tables from FROM's store into TO's empty store, either\n" +
			"driver (sqlite, postgres) in either direction, ids and times exact, as one consistent snapshot of\n" +
			"FROM; it skips what describes running processes (owners, leases, cancel requests), prints the\n" +
			"counts and refuses a store that is not empty. It refuses a FROM that live opsbot processes use,\n" +
			"naming their leases, unless --live: then it copies FROM as of the cut, prints the cut's time, and\n" +
			"what is written after it is not copied.",
		examples: []string{"opsbot store copy --config /etc/opsbot/opsbot.yaml /etc/opsbot/opsbot-postgres.yaml",
			"opsbot store copy --config /etc/opsbot/opsbot-postgres.yaml --live /srv/opsbot-snapshot.yaml"},
	},
	"opsbot audit export": {
		usage: "opsbot audit export [--config FILE] --since WHEN [--until WHEN]",
		what: "Writes the audit log's entries from the first written at or after --since to the last written\n" +
			"before --until (default: the newest), and every entry between them, one JSON object a line on\n" +
			"stdout: id, at, platform, user, room, command, decision, detail, job_id, and the chain: prev (the\n" +
			"hash of the entry before) and hash (of this entry's content and prev); null for entries from before\n" +
			"the chain. WHEN is a duration before now (90m, 36h, 30d) or an RFC 3339 time. What it wrote, and\n" +
			"the last entry's hash, go to stderr: an auditor keeps that hash to check later exports against.",
		examples: []string{"opsbot audit export --config /etc/opsbot/opsbot.yaml --since 30d > audit-2026-04.jsonl",
			"opsbot audit export --since 2026-01-01T00:00:00Z --until 2026-04-01T00:00:00Z"},
	},
	"opsbot audit verify": {
		usage: "opsbot audit verify FILE | --config FILE",
		what: "Checks an export (FILE), or with --config the store's whole audit log, entry by entry: each one's\n" +
			"hash matches its content, and it links to the entry before it (the next id, that entry's hash);\n" +
			"the store's log also runs from its anchor (the chain's start, or the last pruned entry) to its\n" +
			"head. Exit 0 and the last entry's hash when every entry matches; exit 1 naming the first entry\n" +
			"(and line) that does not: an entry changed, removed or out of order. It cannot show entries\n" +
			"rewritten after a point by someone who may write the database, with their hashes: only a hash kept\n" +
			"elsewhere (an earlier export's last one) shows that.",
		examples: []string{"opsbot audit verify audit-2026-04.jsonl", "opsbot audit verify --config /etc/opsbot/opsbot.yaml"},
	},
	"opsbot matrix recovery-key": {
		usage: "opsbot matrix recovery-key [--config FILE]",
		what: "Prints the recovery key of the Matrix account (matrix.user_id) that the store keeps: opsbot made it\n" +
			"when it created the account's cross-signing keys on its first encrypted start (or it was given in\n" +
			"matrix.recovery_key). Keep a copy: a new store or a second machine needs it in matrix.recovery_key\n" +
			"to sign its own device. Anyone with it can sign devices as the bot: treat it as a password.",
		examples: []string{"opsbot matrix recovery-key --config /etc/opsbot/opsbot.yaml"},
	},
	"opsbot health": {
		usage:    "opsbot health [--url URL]",
		what:     "Asks a running serve's /healthz and exits 0 when it answers 200 (the container's HEALTHCHECK).",
		examples: []string{"opsbot health --url http://127.0.0.1:9090/healthz"},
	},
	"opsbot version": {
		usage:    "opsbot version",
		what:     "Prints the version, VCS revision and Go version, and whether Matrix end-to-end encryption is built in.",
		examples: []string{"opsbot version"},
	},
}

// helpRequest is returned when the arguments ask for help (-h, --help): the
// help is printed on stdout and opsbot exits 0.
type helpRequest struct{ text string }

func (h *helpRequest) Error() string { return "help requested" }

// wantsHelp reports whether args ask for help: -h, -help or --help before any "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// helpText renders the help of the subcommand fs parses: what it does, its
// usage, its flags, examples and, for those that take chat commands, the note
// on quoting them.
func helpText(fs *flag.FlagSet) string {
	var b strings.Builder
	doc, ok := subcommands[fs.Name()]
	if ok {
		fmt.Fprintf(&b, "usage: %s\n\n%s\n", doc.usage, doc.what)
	} else {
		fmt.Fprintf(&b, "usage: %s [flags]\n", fs.Name())
	}
	var flags strings.Builder
	out := fs.Output()
	fs.SetOutput(&flags)
	fs.PrintDefaults()
	fs.SetOutput(out)
	if flags.Len() > 0 {
		fmt.Fprintf(&b, "\nflags:\n%s", flags.String())
	}
	if ok && len(doc.examples) > 0 {
		b.WriteString("\nexamples:\n")
		for _, e := range doc.examples {
			fmt.Fprintf(&b, "  %s\n", e)
		}
	}
	if fs.Name() == "opsbot run" {
		fmt.Fprintf(&b, "\n%s\n", quoteNote)
	}
	return b.String()
}

// isHelp reports whether err asks for help, and its text.
func isHelp(err error) (string, bool) {
	var h *helpRequest
	if errors.As(err, &h) {
		return h.text, true
	}
	return "", false
}

// printUsageTo makes fs print its help to w after a bad flag.
func printUsageTo(fs *flag.FlagSet, w io.Writer) {
	fs.Usage = func() { fmt.Fprint(w, helpText(fs)) }
}

// overviewOrder is the order `opsbot --help` lists the subcommands in.
var overviewOrder = []string{"opsbot run", "opsbot demo", "opsbot lab", "opsbot bench", "opsbot config check", "opsbot serve",
	"opsbot store backup", "opsbot store copy", "opsbot audit export", "opsbot audit verify", "opsbot matrix recovery-key", "opsbot health", "opsbot version"}

// overview is `opsbot --help`: each subcommand's usage line, as its own
// --help shows it, on one line.
func overview() string {
	var b strings.Builder
	b.WriteString("opsbot: chat-ops for LLM inference servers (SGLang, vLLM) under systemd\n\nusage:\n")
	for _, name := range overviewOrder {
		b.WriteString("  " + strings.Join(strings.Fields(subcommands[name].usage), " ") + "\n")
	}
	b.WriteString(`
Commands (the same in Slack, Matrix and here): run 'help' to list them:
  opsbot run help
  opsbot run 'help mtp steps'

Each subcommand explains itself: opsbot run --help (or opsbot help run).
`)
	return b.String()
}
