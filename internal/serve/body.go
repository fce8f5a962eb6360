package serve

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/opsbot/opsbot/bot"
)

// errAnswered is what a handler's read of a body gets once the listener
// refused or cut it, and what its own writes get then: the listener has
// answered the request itself.
var errAnswered = bot.ErrBodyRefused

// gatedBody is a request body as its handler reads it, on the handler's
// goroutine. Its first read admits it at the gate (waiting its client's
// turn); from then on each read must come within the body's pace (lim.rate
// after lim.grace), enforced with the connection's read deadline. A
// refusal, a cut, a body over MaxBody or a broken one is counted, answered
// by the listener itself (the handler's own answer is dropped), and the
// read returns errAnswered. A request answered before its body ended
// (refused, or answered by its handler unread) has the rest of its body
// left unread and its connection closed after the answer: net/http would
// otherwise read on, up to 256 KiB at the client's pace, to reuse it.
type gatedBody struct {
	body   io.ReadCloser
	rc     *http.ResponseController
	w      *guardedWriter
	req    *http.Request
	gate   *bodyGate
	client netip.Prefix
	size   int64 // what the pools count: Content-Length, or MaxBody when unknown
	reject func(reason string)

	admitted bool      // holds a pool slot
	reading  bool      // holds a slot of its client's
	start    time.Time // when admitted
	n        int64     // bytes read
	err      error     // the error every later read returns
}

// newGatedBody gates r's body; the handler answers through the body's
// writer (b.w), which wraps w.
func newGatedBody(r *http.Request, w http.ResponseWriter, gate *bodyGate, client netip.Prefix, reject func(string)) *gatedBody {
	size := r.ContentLength
	if size < 0 {
		size = MaxBody
	}
	b := &gatedBody{body: http.MaxBytesReader(w, r.Body, MaxBody), rc: http.NewResponseController(w), req: r,
		gate: gate, client: client, size: size, reject: reject}
	b.w = &guardedWriter{ResponseWriter: w, before: b.answering}
	return b
}

// answering is called once, before the request's answer begins: a body not
// read to its end is read no further.
func (b *gatedBody) answering() {
	if b.err == io.EOF {
		return
	}
	b.w.Header().Set("Connection", "close")
	_ = b.rc.SetReadDeadline(time.Now())
	b.doneReading()
}

func (b *gatedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if !b.admitted {
		if reason := b.gate.admit(b.req.Context(), b.client, b.size); reason != "" {
			return 0, b.refuse(reason)
		}
		b.admitted, b.reading, b.start = true, true, time.Now()
	}
	// The next byte is due when the bytes so far would have come at the
	// pace; ErrNotSupported leaves ReadTimeout to bound the body.
	_ = b.rc.SetReadDeadline(b.start.Add(b.gate.lim.grace + time.Duration(b.n+1)*time.Second/time.Duration(b.gate.lim.rate)))
	n, err := b.body.Read(p)
	b.n += int64(n)
	if err == io.EOF {
		// net/http clears the read deadline as the body ends (its read
		// that watches for the client going away starts then): nothing
		// may set one after, or that read would end the request's context.
		b.doneReading()
		b.err = io.EOF
	} else if err != nil {
		return n, b.refuse(b.reasonOf(err))
	}
	return n, err
}

func (b *gatedBody) Close() error { return b.body.Close() }

// reasonOf names a failed read for opsbot_http_rejected_total.
func (b *gatedBody) reasonOf(err error) string {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "too_slow"
	case errors.As(err, &tooLarge):
		return "too_large"
	}
	return "bad_body"
}

// refuse counts and answers a body refused for reason, and lets go of what
// it holds.
func (b *gatedBody) refuse(reason string) error {
	b.reject(reason)
	b.doneReading()
	code, msg := http.StatusBadRequest, "request body unreadable after "+strconv.FormatInt(b.n, 10)+" bytes"
	switch reason {
	case reasonClientBusy:
		code, msg = http.StatusTooManyRequests, "too many requests being read from one address: try again in a second"
	case reasonPoolFull:
		code, msg = http.StatusServiceUnavailable, "too many requests being read: try again in a second"
	case "too_slow":
		code, msg = http.StatusRequestTimeout, fmt.Sprintf("request body too slow: %d bytes in %s (%d KiB/s needed after %s)",
			b.n, time.Since(b.start).Round(time.Millisecond), b.gate.lim.rate>>10, b.gate.lim.grace)
	case "too_large":
		code, msg = http.StatusRequestEntityTooLarge, "request body over "+strconv.Itoa(MaxBody)+" bytes"
	}
	b.w.answer(code, msg, code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable)
	b.err = errAnswered
	return b.err
}

// doneReading gives back the client's slot, once.
func (b *gatedBody) doneReading() {
	if b.reading {
		b.reading = false
		b.gate.doneReading(b.client)
	}
}

// release lets go of all the body holds once its request is done.
func (b *gatedBody) release() {
	b.doneReading()
	if b.admitted {
		b.admitted = false
		b.gate.give(b.size)
	}
}

// guardedWriter is a handler's ResponseWriter that the listener can answer
// through first: once it has, the handler's own answer is dropped. before
// is called once, as the first answer begins.
type guardedWriter struct {
	http.ResponseWriter
	before          func()
	wrote, answered bool
}

func (g *guardedWriter) WriteHeader(code int) {
	if g.answered {
		return
	}
	g.begin()
	g.ResponseWriter.WriteHeader(code)
}

func (g *guardedWriter) Write(p []byte) (int, error) {
	if g.answered {
		return 0, errAnswered
	}
	g.begin()
	return g.ResponseWriter.Write(p)
}

func (g *guardedWriter) begin() {
	if !g.wrote {
		g.wrote = true
		g.before()
	}
}

// Unwrap is for http.ResponseController.
func (g *guardedWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// answer answers the request with code and msg, unless the handler
// answered first.
func (g *guardedWriter) answer(code int, msg string, retry bool) {
	if g.wrote || g.answered {
		return
	}
	g.begin()
	g.answered = true
	if retry {
		g.Header().Set("Retry-After", "1")
	}
	http.Error(g.ResponseWriter, msg, code)
}
