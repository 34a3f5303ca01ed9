package redislimit

import (
	"errors"

	"github.com/redis/rueidis"
)

// Dial returns a rueidis client for the single Redis at addr
// ("host:port"), to give New, for callers that import no Redis client
// themselves (`levee serve -redis`). Redis need not be up: a client whose
// first dial failed dials again at each command, and the Limiter decides
// locally until Redis answers. Client-side caching is off. For a Redis
// Cluster, or other options, make the client with rueidis.NewClient.
// Close the client after the Limiters that use it.
func Dial(addr string) (rueidis.Client, error) {
	if addr == "" {
		return nil, errors.New("redislimit: Dial: empty address")
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if c == nil {
		return nil, err
	}
	return c, nil
}
