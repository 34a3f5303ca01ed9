package bulkhead

import "errors"

// ErrFull is returned by Acquire when every slot is taken and the wait
// queue is full (or there is no wait queue, the default). TryAcquire
// reports the same condition as ok == false.
var ErrFull = errors.New("bulkhead: full")

// ErrTimeout is wrapped by the error Acquire returns when a queued call
// waited longer than the configured maximum wait (see WithMaxWait). The
// returned error names that maximum; test for it with errors.Is.
var ErrTimeout = errors.New("bulkhead: timed out waiting for a slot")
