package systemd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/ops/remote"
)

// scripted answers `systemctl show` with the next of its states (the last one
// repeats) and records every argv it ran.
type scripted struct {
	mu     sync.Mutex
	shows  []string
	other  remote.Output
	ran    [][]string
	nShows int
}

func (r *scripted) Run(ctx context.Context, stdin []byte, argv ...string) (remote.Output, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return remote.Output{}, err
	}
	r.ran = append(r.ran, append([]string(nil), argv...))
	if len(argv) > 1 && argv[0] == "systemctl" && argv[1] == "show" {
		i := min(r.nShows, len(r.shows)-1)
		r.nShows++
		return remote.Output{Stdout: []byte(r.shows[i])}, nil
	}
	return r.other, nil
}

func show(active, sub string, nrestarts int, result string) string {
	return "Id=x.service\nLoadState=loaded\nActiveState=" + active + "\nSubState=" + sub +
		"\nNRestarts=" + strconv.Itoa(nrestarts) + "\nResult=" + result + "\nExecMainCode=1\nExecMainStatus=1\n"
}

func TestShowArgvAndParse(t *testing.T) {
	t.Parallel()
	r := &scripted{shows: []string{show("active", "running", 0, "success")}}
	st, err := Service{R: r, Unit: "x.service"}.Show(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"systemctl", "show", "-p", strings.Join(ShowProperties, ","), "x.service"}
	if !slices.Equal(r.ran[0], want) {
		t.Fatalf("argv %q, want %q", r.ran[0], want)
	}
	if !st.Active() || st.ID != "x.service" {
		t.Fatalf("state %+v", st)
	}
}

func TestBadUnitNameRunsNothing(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "-x.service", "a b.service", "a\nb"} {
		r := &scripted{shows: []string{show("active", "running", 0, "success")}}
		s := Service{R: r, Unit: name}
		errs := []error{s.Start(context.Background()), s.Stop(context.Background())}
		_, err := s.Show(context.Background())
		errs = append(errs, err)
		_, err = s.Journal(context.Background(), JournalQuery{})
		errs = append(errs, err)
		for i, err := range errs {
			if err == nil {
				t.Errorf("unit %q call %d: no error", name, i)
			}
		}
		if len(r.ran) != 0 {
			t.Errorf("unit %q: ran %q", name, r.ran)
		}
	}
}

func TestControlErrors(t *testing.T) {
	t.Parallel()
	r := &scripted{other: remote.Output{ExitStatus: 1, Stderr: []byte("Job for x.service failed because start of the service was attempted too often.\nSee ...\n")}}
	err := Service{R: r, Unit: "x.service"}.Start(context.Background())
	var ce *CommandError
	if !errors.As(err, &ce) || !errors.Is(err, ErrStartLimit) {
		t.Fatalf("start error %v, want a start-limit *CommandError", err)
	}
	if !strings.HasPrefix(err.Error(), "start x.service: systemctl start x.service: exit status 1") {
		t.Fatalf("message %q", err)
	}
	if !slices.Equal(r.ran[0], []string{"systemctl", "start", "x.service"}) {
		t.Fatalf("argv %q", r.ran[0])
	}
	r.other = remote.Output{}
	for verb, f := range map[string]func(Service, context.Context) error{
		"stop": Service.Stop, "restart": Service.Restart, "reset-failed": Service.ResetFailed,
	} {
		r.ran = nil
		if err := f(Service{R: r, Unit: "x.service"}, context.Background()); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(r.ran[0], []string{"systemctl", verb, "x.service"}) {
			t.Fatalf("%s argv %q", verb, r.ran[0])
		}
	}
	r.ran = nil
	if err := DaemonReload(context.Background(), r); err != nil || !slices.Equal(r.ran[0], []string{"systemctl", "daemon-reload"}) {
		t.Fatalf("daemon-reload: %v %q", err, r.ran)
	}
}

func TestJournalArgv(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 12, 2, 18, 0, 5, 700, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		q    JournalQuery
		want string
	}{
		{JournalQuery{}, "journalctl -u u.service -o cat --no-pager"},
		{JournalQuery{Lines: 50}, "journalctl -u u.service -n 50 -o cat --no-pager"},
		{JournalQuery{Lines: 5, Since: since}, "journalctl -u u.service -n 5 --since|2026-12-02 17:00:05 UTC|-o cat --no-pager"},
	} {
		got := JournalArgv("u.service", tc.q)
		want := []string{}
		for i, part := range strings.Split(tc.want, "|") {
			if i%2 == 1 {
				want = append(want, part)
			} else {
				want = append(want, strings.Fields(part)...)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%+v: %q, want %q", tc.q, got, want)
		}
	}
	if _, err := (Service{R: &scripted{}, Unit: "u.service"}).Journal(context.Background(), JournalQuery{Lines: -1}); err == nil {
		t.Fatal("negative Lines accepted")
	}
}

func TestSplitJournal(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		"":                      nil,
		"-- No entries --\n":    nil,
		"a\nb\n":                {"a", "b"},
		"a\r\n\nb":              {"a", "", "b"},
		"-- No entries --\nx\n": {"-- No entries --", "x"},
	} {
		if got := SplitJournal([]byte(in)); !slices.Equal(got, want) {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestWatchStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := func(shows ...string) Service {
		return Service{R: &scripted{shows: shows}, Unit: "x.service", Poll: time.Millisecond}
	}
	t.Run("loop", func(t *testing.T) {
		s := svc(show("active", "running", 0, "success"), show("activating", "auto-restart", 0, "exit-code"),
			show("active", "running", 1, "exit-code"), show("activating", "auto-restart", 1, "exit-code"))
		_, err := s.WatchStart(ctx, 0, time.Hour)
		var le *LoopError
		if !errors.As(err, &le) || le.Restarts != 1 || le.Unit != "x.service" {
			t.Fatalf("err %v, want *LoopError with 1 restart", err)
		}
	})
	t.Run("loop-queued", func(t *testing.T) {
		s := svc(show("activating", "auto-restart-queued", 4, "exit-code"))
		_, err := s.WatchStart(ctx, 3, time.Hour)
		var le *LoopError
		if !errors.As(err, &le) || le.State.SubState != "auto-restart-queued" {
			t.Fatalf("err %v, want *LoopError", err)
		}
	})
	t.Run("base-reset-by-manual-start", func(t *testing.T) {
		// NRestarts was 3 before the start; systemd reset it to 0.
		s := svc(show("active", "running", 0, "success"), show("activating", "auto-restart", 1, "exit-code"))
		_, err := s.WatchStart(ctx, 3, time.Hour)
		var le *LoopError
		if !errors.As(err, &le) || le.Restarts != 1 {
			t.Fatalf("err %v, want *LoopError with 1 restart", err)
		}
	})
	t.Run("start-limit", func(t *testing.T) {
		s := svc(show("activating", "auto-restart", 0, "exit-code"), show("failed", "failed", 5, "start-limit-hit"))
		_, err := s.WatchStart(ctx, 5, time.Hour)
		var fe *FailedError
		if !errors.As(err, &fe) || !fe.State.StartLimitHit() || !strings.Contains(err.Error(), "reset-failed") {
			t.Fatalf("err %v, want *FailedError for the start limit", err)
		}
	})
	t.Run("failed-beats-restarts", func(t *testing.T) {
		_, err := svc(show("failed", "failed", 3, "exit-code")).WatchStart(ctx, 0, time.Hour)
		var fe *FailedError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), "exited with status 1") {
			t.Fatalf("err %v, want *FailedError", err)
		}
	})
	t.Run("settles", func(t *testing.T) {
		s := svc(show("activating", "start", 0, "success"), show("active", "running", 0, "success"))
		start := time.Now()
		st, err := s.WatchStart(ctx, 0, 30*time.Millisecond)
		if err != nil || !st.Active() {
			t.Fatalf("state %v err %v", st, err)
		}
		if d := time.Since(start); d < 30*time.Millisecond {
			t.Fatalf("returned after %v, before settle", d)
		}
	})
	t.Run("ctx", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		_, err := svc(show("activating", "start", 0, "success")).WatchStart(ctx, 0, time.Hour)
		var we *WaitError
		if !errors.As(err, &we) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "last activating (start)") {
			t.Fatalf("err %v, want *WaitError with the last state", err)
		}
	})
}

func TestWaitStopped(t *testing.T) {
	t.Parallel()
	r := &scripted{shows: []string{show("deactivating", "stop-sigterm", 0, "success"), show("activating", "auto-restart", 0, "exit-code"), show("inactive", "dead", 0, "success")}}
	st, err := Service{R: r, Unit: "x.service", Poll: time.Millisecond}.WaitStopped(context.Background())
	if err != nil || st.ActiveState != "inactive" || r.nShows != 3 {
		t.Fatalf("state %v err %v after %d shows", st, err, r.nShows)
	}
}

// flaky fails its first n calls in transport, then answers like next.
// (A scripted Runner: a connection that drops on demand is not something the
// lab's fault set offers for `systemctl show`.)
type flaky struct {
	n    int
	next *scripted
}

func (f *flaky) Run(ctx context.Context, stdin []byte, argv ...string) (remote.Output, error) {
	if f.n > 0 {
		f.n--
		return remote.Output{}, fmt.Errorf("run systemctl show on gpu1: %w", io.ErrUnexpectedEOF)
	}
	return f.next.Run(ctx, stdin, argv...)
}

func TestWaitRidesOutADroppedConnection(t *testing.T) {
	t.Parallel()
	ok := &flaky{n: transportRetries, next: &scripted{shows: []string{show("inactive", "dead", 0, "success")}}}
	if st, err := (Service{R: ok, Unit: "x.service", Poll: time.Millisecond}).WaitStopped(context.Background()); err != nil || st.ActiveState != "inactive" {
		t.Fatalf("after %d transport failures: %v %v", transportRetries, st, err)
	}
	bad := &flaky{n: transportRetries + 1, next: &scripted{shows: []string{show("inactive", "dead", 0, "success")}}}
	if _, err := (Service{R: bad, Unit: "x.service", Poll: time.Millisecond}).WaitStopped(context.Background()); err == nil ||
		!errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("after %d transport failures: err %v, want the transport error", transportRetries+1, err)
	}
}
