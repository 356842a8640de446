package controller

import "sync"

// inParallel runs do(i) for each i in [0, n), width at a time, and returns
// once every one has: a new leader's reads of the job states and merges of
// the records it inherits, each a round trip to Nomad. do must touch only
// what is its i's alone.
func inParallel(n, width int, do func(i int)) {
	if n == 1 || width <= 1 {
		for i := range n {
			do(i)
		}
		return
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(width, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				do(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
