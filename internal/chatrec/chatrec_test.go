package chatrec

import (
	"context"
	"testing"

	"github.com/opsbot/opsbot/chat"
)

// TestRecorderKeepsEveryCall: Post and Reply number their messages from 1
// with one counter, in the room given (a reply: its parent's); Edit and
// Reply land in the thread of the message named; what the readers return
// are copies.
func TestRecorderKeepsEveryCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := New()
	root, _ := c.Post(ctx, "ops", chat.Message{Text: "root"})
	if root != (chat.Ref{Room: "ops", ID: "1"}) {
		t.Fatalf("first post: %+v", root)
	}
	r1, _ := c.Reply(ctx, root, chat.Message{Text: "r1"})
	if r1 != (chat.Ref{Room: "ops", ID: "2"}) {
		t.Fatalf("reply: %+v", r1)
	}
	if err := c.Edit(ctx, root, chat.Message{Text: "edited"}); err != nil {
		t.Fatal(err)
	}
	other, _ := c.Post(ctx, "lab", chat.Message{Text: "other"})
	c.Reply(ctx, other, chat.Message{Text: "r2"})
	if other.ID != "3" {
		t.Fatalf("second post: %+v", other)
	}

	edits, replies := c.Thread("1")
	if len(edits) != 1 || edits[0].Text != "edited" || len(replies) != 1 || replies[0].Text != "r1" {
		t.Fatalf("thread 1: %+v %+v", edits, replies)
	}
	posts := c.Posts()
	if len(posts) != 2 || posts[0].Text != "root" || posts[1].Text != "other" {
		t.Fatalf("posts: %+v", posts)
	}
	all := c.Replies()
	if len(all) != 2 || all[0].Text != "r1" || all[1].Text != "r2" {
		t.Fatalf("replies: %+v", all)
	}
	posts[0].Text, edits[0].Text, all[0].Text = "x", "x", "x"
	if e, _ := c.Thread("1"); c.Posts()[0].Text != "root" || e[0].Text != "edited" || c.Replies()[0].Text != "r1" {
		t.Fatal("a reader's result shares memory with the recorder")
	}
}
