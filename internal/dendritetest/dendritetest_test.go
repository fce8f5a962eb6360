package dendritetest

import (
	"context"
	"testing"
	"time"

	"maunium.net/go/mautrix"
)

// TestStartRegisterSend starts Dendrite, registers a user and creates a room
// and sends a message in it: the homeserver the Matrix tests build on works.
func TestStartRegisterSend(t *testing.T) {
	s := Start(t)
	u := s.Register(t, "alice")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	room, err := u.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "private_chat"})
	if err != nil {
		t.Fatalf("create room: %v", err)
	}
	if _, err := u.Client.SendText(ctx, room.RoomID, "hello"); err != nil {
		t.Fatalf("send: %v", err)
	}
	who, err := u.Client.Whoami(ctx)
	if err != nil || who.UserID != u.ID {
		t.Fatalf("whoami: %v %v, want %s", who, err, u.ID)
	}
}
