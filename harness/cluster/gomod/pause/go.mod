module fakedev.local/pause

go 1.26
