package console

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/internal/testkit"
)

func TestIsYes(t *testing.T) {
	tok := "0123456789abcdef0123456789abcdef"
	for _, a := range []string{"y", "YES\n", " yes ", "confirm " + tok, "/confirm " + strings.ToUpper(tok) + "\n"} {
		if !IsYes(a, tok) {
			t.Errorf("%q is not taken as a yes", a)
		}
	}
	for _, a := range []string{"", "n", "no", "confirm", "confirm 00", "confirm " + tok + " now", "yes please"} {
		if IsYes(a, tok) {
			t.Errorf("%q is taken as a yes", a)
		}
	}
	if IsYes("confirm ", "") {
		t.Error("an empty token confirmed")
	}
}

// readLines gives every line of any length: a line over the limit comes as
// its length only, and the lines after it still come.
func TestReadLinesTooLong(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	in := "help\n" + long + "\n" + "gpu status\r\n" + strings.Repeat("y", 11) + "\nlast"
	out := make(chan inputLine)
	go readLines(context.Background(), strings.NewReader(in), 10, out)
	var got []inputLine
	for l := range out {
		got = append(got, l)
	}
	want := []inputLine{{text: "help"}, {tooLong: 1 << 20}, {text: "gpu status"}, {tooLong: 11}, {text: "last"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A read error ends the input with the error, after the lines before it.
func TestReadLinesError(t *testing.T) {
	out := make(chan inputLine)
	go readLines(context.Background(), io.MultiReader(strings.NewReader("help\n"), errReader{}), 10, out)
	var got []inputLine
	for l := range out {
		got = append(got, l)
	}
	if len(got) != 2 || got[0].text != "help" || got[1].err == nil {
		t.Fatalf("got %+v", got)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

// waitBot is a Bot whose one job, #1, runs until release is closed; it
// says on waiting when someone starts waiting for it.
type waitBot struct {
	release chan struct{}
	waiting chan struct{}
	handled []string
}

func (b *waitBot) Handle(_ context.Context, req bot.Request) bot.Reply {
	b.handled = append(b.handled, req.Text)
	return bot.Reply{Outcome: bot.Queued, JobID: 1}
}
func (b *waitBot) Act(context.Context, bot.ActionRequest) bot.Reply { return bot.Reply{} }
func (b *waitBot) Previewed(context.Context, string, string) error  { return nil }
func (b *waitBot) Check(string) error                               { return nil }
func (b *waitBot) AwaitRecord(context.Context, int64) error         { return nil }
func (b *waitBot) Active() []int64 {
	select {
	case <-b.release:
		return nil
	default:
		return []int64{1}
	}
}
func (b *waitBot) Wait(ctx context.Context, id int64) (bot.JobOutcome, error) {
	close(b.waiting)
	select {
	case <-b.release:
		return bot.JobOutcome{ID: id, Status: "succeeded"}, nil
	case <-ctx.Done():
		return bot.JobOutcome{ID: id}, ctx.Err()
	}
}

// `quit` (and `exit`, and the end of the input) ends the demo only after the
// jobs already started have finished, as its help promises; lines after
// `quit` are not run.
func TestDemoQuitWaitsForRunningJobs(t *testing.T) {
	for _, in := range []string{"mtp steps 4\nquit\nmtp steps 5\n", "mtp steps 4\nexit\n", "mtp steps 4\n"} {
		b := &waitBot{release: make(chan struct{}), waiting: make(chan struct{})}
		var out testkit.Buffer
		done := make(chan error, 1)
		go func() {
			done <- Demo(context.Background(), DemoOptions{Bot: b, Console: New(&out), User: "op", In: strings.NewReader(in)})
		}()
		select {
		case <-b.waiting:
		case err := <-done:
			t.Fatalf("%q: the demo ended (%v) without waiting for job #1:\n%s", in, err, out.String())
		case <-time.After(10 * time.Second):
			t.Fatalf("%q: the demo never waited for job #1", in)
		}
		select {
		case err := <-done:
			t.Fatalf("%q: the demo ended (%v) while job #1 still ran", in, err)
		default:
		}
		close(b.release)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%q: %v", in, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%q: the demo did not end after job #1 did", in)
		}
		if len(b.handled) != 1 {
			t.Errorf("%q: ran %q, want only the line before quit", in, b.handled)
		}
		if !strings.Contains(out.String(), "waiting for job #1 to finish") {
			t.Errorf("%q: the demo does not say what it waits for:\n%s", in, out.String())
		}
	}
}
