package raftnode_test

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// firstTouchCost measures what touching a fresh anonymous page costs
// here (the page fault and, in a VM, the host backing the page): a heap
// that is still growing pays it for every new page, which can dwarf the
// work being measured.
func firstTouchCost() string {
	const size = 64 << 20
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return "not measured: " + err.Error()
	}
	defer syscall.Munmap(b)
	// Small pages, as the Go heap gets them: with transparent huge pages
	// set to "always" the kernel could otherwise back this with 2 MiB
	// pages and understate the per-page cost.
	if err := syscall.Madvise(b, syscall.MADV_NOHUGEPAGE); err != nil {
		return "not measured: " + err.Error()
	}
	page := os.Getpagesize()
	t0 := time.Now()
	for i := 0; i < size; i += page {
		b[i] = 1
	}
	d := time.Since(t0)
	return fmt.Sprintf("%.2f µs per %d KiB page (%.0f ms per 100 MiB)",
		float64(d.Nanoseconds())/1e3/float64(size/page), page>>10, d.Seconds()*1e3*100/64)
}
