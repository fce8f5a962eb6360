package unit

import (
	"errors"
	"fmt"
)

// Code says why an operation on a unit was refused. Callers branch on it with
// errors.As(err, &*Error) or errors.Is(err, ErrXxx).
type Code int

// Refusal codes.
const (
	// CodeNoExecStart: the unit (with its drop-ins) has no effective ExecStart=.
	CodeNoExecStart Code = iota + 1
	// CodeAmbiguous: several commands could be the engine (Type=oneshot style units).
	CodeAmbiguous
	// CodeNoEngine: the command line is neither SGLang nor vLLM.
	CodeNoEngine
	// CodeNoSpeculation: the engine has no speculative decoding configured.
	CodeNoSpeculation
	// CodeOutOfRange: the requested value is outside the accepted range.
	CodeOutOfRange
	// CodeRejected: the engine would reject the resulting settings.
	CodeRejected
	// CodeUnsupported: the settings exist but cannot be edited safely (env vars,
	// specifiers, an algorithm without draft steps, ...).
	CodeUnsupported
	// CodeInvalid: the existing settings are malformed (ambiguous flag prefix,
	// missing flag value, bad JSON, non-numeric value).
	CodeInvalid
)

var codeNames = map[Code]string{
	CodeNoExecStart:   "no_execstart",
	CodeAmbiguous:     "ambiguous",
	CodeNoEngine:      "no_engine",
	CodeNoSpeculation: "no_speculation",
	CodeOutOfRange:    "out_of_range",
	CodeRejected:      "rejected",
	CodeUnsupported:   "unsupported",
	CodeInvalid:       "invalid",
}

// String returns a stable snake_case name for the code.
func (c Code) String() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return fmt.Sprintf("code(%d)", int(c))
}

// Error is a refusal: the unit was not changed. Msg is a complete sentence for
// an operator (it names the fix where there is one).
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Is makes errors.Is(err, ErrNoEngine) and friends match any *Error with the same Code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Msg == "" && t.Code == e.Code
}

// Sentinels for errors.Is; they match every *Error with the same Code.
var (
	ErrNoExecStart   error = &Error{Code: CodeNoExecStart}
	ErrAmbiguous     error = &Error{Code: CodeAmbiguous}
	ErrNoEngine      error = &Error{Code: CodeNoEngine}
	ErrNoSpeculation error = &Error{Code: CodeNoSpeculation}
	ErrOutOfRange    error = &Error{Code: CodeOutOfRange}
	ErrRejected      error = &Error{Code: CodeRejected}
	ErrUnsupported   error = &Error{Code: CodeUnsupported}
	ErrInvalid       error = &Error{Code: CodeInvalid}
)

func refuse(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Msg: fmt.Sprintf(format, args...)}
}

// SyntaxError reports unit text that systemd itself would not accept.
// Offset is the byte offset in the text (or in the command line given to
// ParseCommandLine), Line the 1-based line number when known (0 otherwise).
type SyntaxError struct {
	Line   int
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return fmt.Sprintf("offset %d: %s", e.Offset, e.Msg)
}

// errInternal marks a self-check failure of the editor (a bug): the edit is dropped.
var errInternal = errors.New("internal check failed")
