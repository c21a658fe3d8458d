package lease_test

import (
	"testing"

	"hyapp/room-service/lease"
	"hyapp/room-service/lease/leasetest"
)

func TestLocalContract(t *testing.T) {
	leasetest.Run(t, func(*testing.T) (lease.Lease, lease.Lease, string) {
		l := lease.NewLocal()
		return l, l, "r1"
	})
}
