package connstr

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// ParseMySQL reads a MySQL connection string, a mysql:// or mariadb://
// URL (user:password@host:port/database?param=value, the port 3306 when
// left out, the host 127.0.0.1) or a go-sql-driver DSN
// (user:password@tcp(host:port)/database?param=value), into the driver's
// config. It is the one parser of MySQL connection strings: the targets,
// the readers and the commands all read them here, so that every one
// accepts the same forms. Its errors never quote the password: url.Parse's
// and some of the driver's would, so they say which part failed instead.
func ParseMySQL(s string) (*mysql.Config, error) {
	scheme, _, ok := strings.Cut(s, "://")
	if !ok || !isScheme(scheme) {
		cfg, err := mysql.ParseDSN(s)
		if err != nil {
			return nil, mysqlDSNError(s, err)
		}
		return cfg, nil
	}
	if sc := strings.ToLower(scheme); sc != "mysql" && sc != "mariadb" {
		return nil, fmt.Errorf("MySQL URL scheme %q: want mysql://user:password@host:port/database (or mariadb://)", scheme)
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, mysqlURLError(s, err)
	}
	host := u.Host
	if host == "" {
		host = "127.0.0.1:3306"
	} else if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "3306")
	}
	db := strings.TrimPrefix(u.Path, "/")
	dsn := "tcp(" + host + ")/" + url.PathEscape(db)
	if u.RawQuery != "" {
		dsn += "?" + u.RawQuery
	}
	// The DSN built holds no user information: the driver's error about
	// it cannot quote the password.
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("the MySQL URL's host, port, database or parameters do not parse: %w", err)
	}
	cfg.DBName = db
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	return cfg, nil
}

// mysqlURLError explains why a MySQL URL does not parse without quoting
// it: url.Parse's error holds the whole URL, password included (and one
// with a bare % is exactly what fails). It says which part failed
// instead, quoting only the part after the user information.
func mysqlURLError(s string, err error) error {
	scheme, rest, _ := strings.Cut(s, "://")
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return fmt.Errorf("the MySQL URL does not parse: %w", err) // no user information to hide
	}
	userinfo, hostPart := rest[:at], rest[at+1:]
	if u, perr := url.Parse(scheme + "://" + userinfo + "@host/"); perr != nil || u.Host != "host" || u.User == nil {
		return errors.New("the MySQL URL does not parse: the user name or password (the part before the @) is not valid in a URL: " +
			"percent-encode its special characters (% as %25, / as %2F, ? as %3F, # as %23, @ as %40, : in the user name as %3A), " +
			"or give the password in a password file")
	}
	if _, perr := url.Parse(scheme + "://" + hostPart); perr != nil {
		return fmt.Errorf("the MySQL URL does not parse: the part after the user and password (host, port, database) does not parse: %w", perr)
	}
	return errors.New("the MySQL URL does not parse (it is not quoted here because it holds a password): want mysql://user:password@host:port/database")
}

// mysqlDSNError explains why a go-sql-driver DSN does not parse without
// quoting the password, which some of the driver's errors would.
func mysqlDSNError(dsn string, err error) error {
	left := dsn
	if slash := strings.LastIndexByte(dsn, '/'); slash >= 0 {
		left = dsn[:slash]
	}
	at := strings.LastIndexByte(left, '@')
	if at < 0 {
		if strings.Contains(left, ":") && !strings.Contains(left, "(") {
			// Perhaps user:password without the @ (or with a / in the
			// password): nothing of it is shown.
			return errors.New("the MySQL DSN does not parse: the part before the last / is neither user:password@tcp(host:port) nor tcp(host:port) " +
				"(is the @ missing, or is there a / in the password? Give the password in a password file, or use a mysql:// URL with it percent-encoded)")
		}
		return fmt.Errorf("the MySQL DSN does not parse: %w", err) // no user information to hide
	}
	// Parse it again without the user information: an error then cannot
	// hold the password, and no error means the password was the trouble.
	if _, perr := mysql.ParseDSN("user:" + Masked + dsn[at:]); perr != nil {
		return fmt.Errorf("the MySQL DSN: the part after the user and password does not parse: %w", perr)
	}
	return errors.New("the MySQL DSN does not parse: the user name or password (before the last @) holds characters the DSN form cannot carry; " +
		"give the password in a password file, or use a mysql:// URL with it percent-encoded")
}
