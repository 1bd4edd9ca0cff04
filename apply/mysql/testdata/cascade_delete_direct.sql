DELETE `x0` FROM `shop`.`orders` AS `x0`
WHERE `x0`.`customer_id` = 7
