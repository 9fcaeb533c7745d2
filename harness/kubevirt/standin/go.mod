module fakedev.local/virt-launcher-standin

go 1.22
