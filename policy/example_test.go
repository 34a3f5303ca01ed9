package policy_test

import (
	"fmt"

	"github.com/levee-go/levee/policy"
)

func ExampleDecode() {
	p, err := policy.Decode("policy.yaml", []byte(`
preset:
  max_rate: 6000/min
rules:
  - methods: [/shop.Cart/*]
    guards:
      - {type: bulkhead, limit: 32}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Preset.MaxRate, p.Rules[0].Name, p.Rules[0].Guards[0].Name, p.Rules[0].Guards[0].Limit)
	// Output: 100 /shop.Cart/* bulkhead 32
}

func ExampleDecode_error() {
	_, err := policy.Decode("policy.yaml", []byte(`
preset:
  max_rate: 100
  cpuu: true
rules:
  - methods: [/shop.Cart/*]
    guards:
      - {type: bulkhead, limit: 0}
      - {type: queuedelay, target: 1s, interval: 100ms}
`))
	fmt.Println(err)
	// Output:
	// policy.yaml:3:13: preset.max_rate: want a rate such as 100/s or 6000/min, got an integer 100
	// policy.yaml:4:3: preset.cpuu: unknown field "cpuu" (want one of enabled, max_rate, max_concurrency, client_rate, cpu, memory, code, shadow, methods)
	// policy.yaml:8:33: rules[0].guards[0].limit: must be an integer between 1 and 1048576, got 0
	// policy.yaml:9:36: rules[0].guards[1].target: must be <= interval (100ms), got 1s
}
