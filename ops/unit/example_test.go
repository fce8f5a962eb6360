package unit_test

import (
	"errors"
	"fmt"

	"github.com/opsbot/opsbot/ops/unit"
)

func ExampleSetSteps() {
	text := "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /m \\\n" +
		"    --speculative-algo NEXTN \\\n    --speculative-num-steps 3\n"
	e, err := unit.SetSteps(text, 10, unit.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(e.After)
	for _, c := range e.Changed {
		fmt.Printf("%s: %q -> %q\n", c.Flag, c.From, c.To)
	}

	_, err = unit.SetSteps("[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --tp 4\n", 10, unit.Options{})
	fmt.Println(errors.Is(err, unit.ErrNoSpeculation), err)
	// Output:
	// [Service]
	// ExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /m \
	//     --speculative-algo NEXTN \
	//     --speculative-num-steps 10 \
	//     --speculative-eagle-topk 1 \
	//     --speculative-num-draft-tokens 11
	// --speculative-num-steps: "3" -> "10"
	// --speculative-eagle-topk: "" -> "1"
	// --speculative-num-draft-tokens: "" -> "11"
	// true refusing to invent speculative decoding: the unit has no --speculative-algorithm
}
