// etcd's own server main (go.etcd.io/etcd/server/v3/etcdmain), as the etcd binary runs it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
