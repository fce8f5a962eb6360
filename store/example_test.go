package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/opsbot/opsbot/store"
)

func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "opsbot-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	s, err := store.Open(ctx, filepath.Join(dir, "opsbot.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	// At start-up: whatever a crash left running is over.
	if _, err := s.InterruptUnfinished(ctx, nil); err != nil {
		log.Fatal(err)
	}

	// The ack path: job row and audit entry in one transaction.
	j, err := s.CreateJobAudited(ctx,
		store.Job{Command: "mtp steps 10 qwen", Platform: "slack", User: "U1", Service: "qwen", Host: "gpu1"},
		store.AuditEntry{Platform: "slack", User: "U1", Command: "mtp steps 10 qwen", Decision: store.DecisionAccepted})
	if err != nil {
		log.Fatal(err)
	}
	if err := s.StartJob(ctx, j.ID); err != nil {
		log.Fatal(err)
	}
	if err := s.AppendEvent(ctx, store.Event{JobID: j.ID, Step: "stop", Status: "done"}); err != nil {
		log.Fatal(err)
	}
	if err := s.FinishJob(ctx, j.ID, store.Succeeded, "", json.RawMessage(`{"incidents":[]}`)); err != nil {
		log.Fatal(err)
	}

	err = s.FinishJob(ctx, j.ID, store.Failed, "again", nil)
	var te *store.TransitionError
	fmt.Println(errors.As(err, &te), te.From)

	_, err = s.Job(ctx, 999)
	fmt.Println(errors.Is(err, store.ErrNotFound))

	got, err := s.Job(ctx, j.ID)
	if err != nil {
		log.Fatal(err)
	}
	evs, err := s.Events(ctx, j.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.Status, len(evs), evs[0].Seq)
	// Output:
	// true succeeded
	// true
	// succeeded 1 1
}
