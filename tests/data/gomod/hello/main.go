// A dependency-free program that stands in for a control-plane binary in the build-cache tests.
package main

import "fmt"

func main() { fmt.Println("hello from the cache test") }
